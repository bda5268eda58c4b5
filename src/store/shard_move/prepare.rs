//! Step 1 of a move: the new node gets an empty copy of the data table
//! (made from the old node's `SHOW CREATE TABLE`), and the head a spare
//! Spider table whose one partition comment names the new node.

use super::tables::{count_rows, engine_of, retired_name, show_create, table_exists};
use crate::store::cluster::{NodeAddress, Placement};
use crate::store::error::StoreError;
use sqlx::mysql::MySqlConnection;

/// The empty table on the new node, made as the old node has it. An empty
/// table of that name there is a leftover of an interrupted move (the head
/// never read it) and is made again; one holding rows is refused.
pub(super) async fn make_target_table(
    source: &mut MySqlConnection,
    target: &mut MySqlConnection,
    data_table: &str,
    to_server: &str,
    to_node: &NodeAddress,
) -> Result<(), StoreError> {
    if table_exists(target, data_table).await? {
        let rows = count_rows(target, data_table).await?;
        if rows > 0 {
            return Err(StoreError::Refused(format!(
                "{to_server} ({to_node}) already has a `{data_table}` holding {rows} rows, which \
                 the head does not read (a copy left by an interrupted move?): check it and drop \
                 it there, then run the move again"
            )));
        }
        sqlx::query(&format!("DROP TABLE `{data_table}`"))
            .execute(&mut *target)
            .await?;
    }
    let ddl = show_create(source, data_table).await?;
    sqlx::query(&ddl).execute(&mut *target).await?;
    Ok(())
}

/// `links_moving`: the head's table with `from`'s partition pointing at
/// the new server. Leftover spare or retired Spider tables of an
/// interrupted move are dropped first (they hold no rows).
pub(super) async fn prepare_spare_table(
    head: &mut MySqlConnection,
    from: &Placement,
    to_server: &str,
) -> Result<String, StoreError> {
    let spare = format!("{}_moving", from.table);
    for leftover in [spare.clone(), retired_name(&from.table)] {
        match engine_of(head, &leftover).await? {
            None => {}
            Some(engine) if engine.eq_ignore_ascii_case("spider") => {
                sqlx::query(&format!("DROP TABLE `{leftover}`"))
                    .execute(&mut *head)
                    .await?;
            }
            Some(engine) => {
                return Err(StoreError::Refused(format!(
                    "the head has a table `{leftover}` ({engine}) in the way of the move: \
                     rename it"
                )))
            }
        }
    }
    let ddl = show_create(head, &from.table).await?;
    let ddl = spare_ddl(
        &ddl,
        &from.table,
        &spare,
        &from.server,
        to_server,
        &from.data_table,
    )?;
    sqlx::query(&ddl).execute(&mut *head).await?;
    Ok(spare)
}

/// The head's `CREATE TABLE` renamed to `spare`, with the one partition
/// comment naming `data_table` on `from_server` now naming `to_server`.
fn spare_ddl(
    ddl: &str,
    table: &str,
    spare: &str,
    from_server: &str,
    to_server: &str,
    data_table: &str,
) -> Result<String, StoreError> {
    let create = format!("CREATE TABLE `{table}`");
    let old = format!("srv \"{from_server}\", table \"{data_table}\"");
    if !ddl.starts_with(&create) || ddl.matches(&old).count() != 1 {
        return Err(StoreError::Corrupt {
            table: "links",
            detail: format!(
                "the head's `{table}` definition does not have exactly one partition comment \
                 {old:?}; move refused"
            ),
        });
    }
    let new = format!("srv \"{to_server}\", table \"{data_table}\"");
    Ok(ddl
        .replacen(&create, &format!("CREATE TABLE `{spare}`"), 1)
        .replacen(&old, &new, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spare_table_changes_one_partition_comment() {
        let ddl =
            "CREATE TABLE `links` (\n  `id` bigint\n) ENGINE=SPIDER PARTITION BY KEY (`uuid`)\n\
                   (PARTITION `s00` COMMENT = 'srv \"a\", table \"links_00\"' ENGINE = SPIDER,\n \
                   PARTITION `s01` COMMENT = 'srv \"b\", table \"links_01\"' ENGINE = SPIDER)";
        let spare = spare_ddl(ddl, "links", "links_moving", "b", "c", "links_01").unwrap();
        assert!(spare.starts_with("CREATE TABLE `links_moving`"), "{spare}");
        assert!(spare.contains("srv \"a\", table \"links_00\""), "{spare}");
        assert!(spare.contains("srv \"c\", table \"links_01\""), "{spare}");
        assert!(spare_ddl(ddl, "links", "links_moving", "a", "c", "links_01").is_err());
    }
}
