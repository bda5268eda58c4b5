//! The plan of `linktrack shards rebalance`: which data tables move where
//! so that every node holds as many as the others (give or take one).

use crate::store::cluster::{self, Placement};

/// A plan that evens out the data tables of each kind over `servers`:
/// tables on servers not in the list move first (draining a node), then
/// the highest-numbered table of the fullest node goes to the emptiest
/// until no two nodes differ by more than one. Links and events plan alike,
/// so `links_NN` and `events_NN` stay together.
pub fn rebalance_plan(placements: &[Placement], servers: &[String]) -> Vec<(String, String)> {
    let mut moves = Vec::new();
    if servers.is_empty() {
        return moves;
    }
    for (kind, _) in cluster::SHARDED_TABLES {
        let mut held: Vec<Vec<String>> = vec![Vec::new(); servers.len()];
        let mut homeless = Vec::new();
        for p in placements.iter().filter(|p| p.table == kind) {
            match servers.iter().position(|s| *s == p.server) {
                Some(at) => held[at].push(p.data_table.clone()),
                None => homeless.push(p.data_table.clone()),
            }
        }
        let emptiest =
            |held: &Vec<Vec<String>>| (0..held.len()).min_by_key(|&n| held[n].len()).unwrap_or(0);
        for table in homeless {
            let to = emptiest(&held);
            held[to].push(table.clone());
            moves.push((table, servers[to].clone()));
        }
        loop {
            let to = emptiest(&held);
            let from = (0..held.len())
                .rev()
                .max_by_key(|&n| held[n].len())
                .unwrap_or(0);
            if held[from].len() <= held[to].len() + 1 {
                break;
            }
            held[from].sort();
            let Some(table) = held[from].pop() else { break };
            held[to].push(table.clone());
            moves.push((table, servers[to].clone()));
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::cluster::NodeAddress;

    fn at(table: &str, n: u32, server: &str) -> Placement {
        Placement {
            table: table.into(),
            partition: format!("s{n:02}"),
            server: server.into(),
            data_table: cluster::data_table(table, n),
            node: NodeAddress::parse("mysql://root@h/db").unwrap(),
        }
    }

    #[test]
    fn a_third_node_gets_a_third_of_the_tables_links_and_events_alike() {
        let mut placements = Vec::new();
        for kind in ["links", "events"] {
            for n in 0..15 {
                placements.push(at(kind, n, ["a", "b"][n as usize % 2]));
            }
        }
        let servers: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let plan = rebalance_plan(&placements, &servers);
        assert_eq!(plan.len(), 10, "{plan:?}");
        assert!(plan.iter().all(|(_, to)| to == "c"), "{plan:?}");
        let links: Vec<&str> = plan
            .iter()
            .filter_map(|(t, _)| t.strip_prefix("links_"))
            .collect();
        let events: Vec<&str> = plan
            .iter()
            .filter_map(|(t, _)| t.strip_prefix("events_"))
            .collect();
        assert_eq!(links, events);
        assert!(rebalance_plan(&[at("links", 0, "a"), at("links", 1, "b")], &servers).is_empty());
    }

    #[test]
    fn a_node_left_out_is_drained() {
        let placements = [
            at("links", 0, "a"),
            at("links", 1, "gone"),
            at("links", 2, "b"),
        ];
        let plan = rebalance_plan(&placements, &["a".into(), "b".into()]);
        assert_eq!(plan, [("links_01".to_owned(), "a".to_owned())]);
    }
}
