#!/usr/bin/env python3
"""Try to crash a MariaDB Spider head with DEFAULT NEXT VALUE FOR a sequence
under prepared 1,000-row INSERTs, with the plain `mariadb` client only.
  docs/spider-nextval-repro.py HEAD_PORT NODE_PORT[,NODE_PORT…] [CLIENTS=8] [STATEMENTS=25]
Each client PREPAREs the 1,000-row INSERT (9 columns; the id from the
column default) and EXECUTEs it STATEMENTS times, a point SELECT through
the head after each. Written for docs/scaling.md, "The old head crash".
The cluster: scripts/spider-cluster start DIR (root, no password)."""
import subprocess, sys, uuid, datetime, threading

head, nodes = sys.argv[1], sys.argv[2].split(",")
clients = int(sys.argv[3]) if len(sys.argv) > 3 else 8
statements = int(sys.argv[4]) if len(sys.argv) > 4 else 25
SHARDS, ROWS = 15, 1000

def sql(port, text, db=None):
    args = ["mariadb", "--user=root", "--host=127.0.0.1", f"--port={port}", "--batch"]
    if db: args.append(f"--database={db}")
    return subprocess.run(args, input=text, text=True, capture_output=True)

def check(out, what):
    if out.returncode != 0:
        sys.exit(f"{what}: {out.stderr}")

COLUMNS = """
  uuid        BINARY(16)      NOT NULL,
  inserted    DATE            NOT NULL,
  kind        ENUM('click','image','pixel','unsubscribe') NOT NULL,
  mailing_id  VARCHAR(64)     NOT NULL,
  letter_id   BIGINT UNSIGNED NOT NULL,
  email       VARCHAR(320)    NOT NULL,
  position    INT UNSIGNED    NOT NULL,
  url         MEDIUMTEXT      NOT NULL,
  meta        JSON            NULL,
  PRIMARY KEY (id, inserted),
  UNIQUE KEY uuid (uuid, inserted),
  KEY mailing_letter (mailing_id, letter_id)
"""
# The head's table: a primary key must hold the KEY partitioning column,
# so the head has a plain key on id (as linktrack's old migrate made it).
HEAD_COLUMNS = COLUMNS.replace("PRIMARY KEY (id, inserted)", "KEY id (id)")
today = datetime.date.today()
for port in nodes:
    tables = "".join(
        f"CREATE TABLE links_{n:02} (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,{COLUMNS})"
        " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci ROW_FORMAT=COMPRESSED"
        f" PARTITION BY RANGE COLUMNS(inserted) (PARTITION p0 VALUES LESS THAN ('{today + datetime.timedelta(days=2)}'));\n"
        for n in range(SHARDS) if n % len(nodes) == nodes.index(port))
    check(sql(port, "DROP DATABASE IF EXISTS repro; CREATE DATABASE repro; USE repro;\n" + tables), f"node {port}")
servers = "".join(
    f"DROP SERVER IF EXISTS repro_{i}; CREATE SERVER repro_{i} FOREIGN DATA WRAPPER mysql "
    f"OPTIONS (HOST '127.0.0.1', PORT {p}, USER 'root', PASSWORD '', DATABASE 'repro');\n"
    for i, p in enumerate(nodes))
parts = ",\n".join(
    f"PARTITION s{n:02} COMMENT = 'srv \"repro_{n % len(nodes)}\", table \"links_{n:02}\"'"
    for n in range(SHARDS))
head_sql = f"""
INSTALL SONAME 'ha_spider';
SET GLOBAL spider_conn_recycle_mode = 1;
SET GLOBAL spider_direct_dup_insert = 1;
DROP DATABASE IF EXISTS repro; CREATE DATABASE repro; USE repro;
{servers}
CREATE SEQUENCE links_ids START WITH 1 CACHE 1000;
CREATE TABLE links (id BIGINT UNSIGNED NOT NULL DEFAULT (NEXT VALUE FOR links_ids),{HEAD_COLUMNS})
ENGINE=SPIDER DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci COMMENT='wrapper "mysql"'
PARTITION BY KEY (uuid) ({parts});
"""
out = sql(head, head_sql)
if out.returncode != 0 and "already installed" not in out.stderr:
    # INSTALL fails once the plugin is there; run the rest without it.
    check(sql(head, head_sql.split("\n", 2)[2]), "head")

cols = "uuid, inserted, kind, mailing_id, letter_id, email, position, url, meta"
placeholders = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * ROWS)
prepare = f"PREPARE ins FROM 'INSERT INTO links ({cols}) VALUES {placeholders}';\n"

def client(c):
    lines = ["USE repro;", prepare]
    for s in range(statements):
        args = []
        for r in range(ROWS):
            n = (c * statements + s) * ROWS + r
            args += [f"X'{uuid.uuid4().hex}'", f"'{today}'", "'click'", "'bench'", str(n),
                     f"'r{n}@example.com'", str(n % 20), f"'https://example.com/article/{n}?utm_source=newsletter'", "NULL"]
        lines.append(f"EXECUTE ins USING {', '.join(args)};")
        lines.append(f"SELECT id FROM links WHERE uuid = {args[0]} AND inserted = '{today}';")
    out = sql(head, "\n".join(lines))
    results[c] = (out.returncode, out.stderr.strip()[:300])

results = {}
threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
for c, r in sorted(results.items()): print(f"client {c}: exit {r[0]} {r[1]}")
print(sql(head, "SELECT COUNT(*) FROM repro.links").stdout.strip().replace("\n", " "))
