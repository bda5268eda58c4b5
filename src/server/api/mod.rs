//! The operators' HTTP API under `/api/` (docs/api.md), apart from the
//! dashboard's pages (`server/stats/`): the caller extractor and its one
//! scope check (`caller.rs`), the error every answer has (`error.rs`), JSON
//! bodies (`json_body.rs`), the shared state (`state.rs`), the handlers
//! (`stats.rs`, `export.rs`, `keys.rs`, a mailing's links in `links.rs`),
//! the live event stream (`events_stream.rs`, fed by `event_feed.rs`), the
//! suppression and tracking opt-out lists (`address_lists.rs`), the
//! mailings' list (`mailings.rs`), erasing an address (`erase.rs`),
//! letters tracked for senders that send them themselves (`letters.rs`,
//! with the tracker made on the first call of each day in
//! `letter_tracker.rs`) and the OpenAPI description
//! (`description.rs`, open schemas of the store's answers in `schema.rs`).
//!
//! Every route is registered through utoipa-axum's `routes!`, which adds
//! the handler's description with it: a route cannot exist undescribed.
//! `GET /api/openapi.json` serves the description, without a key.

mod address_lists;
mod caller;
mod description;
mod erase;
mod error;
pub mod event_feed;
mod events_stream;
mod export;
mod json_body;
mod keys;
mod letter_tracker;
mod letters;
mod links;
mod mailings;
mod schema;
mod state;
mod stats;

pub use caller::ApiCaller;
pub use error::{ApiError, ErrorBody};
pub(crate) use letter_tracker::LetterTracking;
pub use state::ApiState;

use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The API's routes and their description, before the state is given.
pub fn described_routes() -> (Router<ApiState>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(description::ApiDoc::openapi())
        .routes(routes!(stats::stats))
        .routes(routes!(stats::segment))
        .routes(routes!(stats::breakdowns))
        .routes(routes!(stats::breakdowns_overall))
        .routes(routes!(export::recipients))
        .routes(routes!(keys::create, keys::list))
        .routes(routes!(keys::revoke))
        .routes(routes!(mailings::list))
        .routes(routes!(erase::erase))
        .routes(routes!(letters::track_letter))
        .routes(routes!(letters::track_letters))
        .routes(routes!(links::list))
        .routes(routes!(links::repoint_link))
        .routes(routes!(events_stream::stream))
        .routes(routes!(
            address_lists::list_suppressions,
            address_lists::add_suppressions
        ))
        .routes(routes!(address_lists::import_suppressions))
        .routes(routes!(address_lists::remove_suppression))
        .routes(routes!(
            address_lists::list_tracking_optouts,
            address_lists::add_tracking_optouts
        ))
        .routes(routes!(address_lists::import_tracking_optouts))
        .routes(routes!(address_lists::remove_tracking_optout))
        .split_for_parts()
}

/// The API's router, `GET /api/openapi.json` included. Mount into the
/// public listener with `.merge(router(state))`.
pub fn router(state: ApiState) -> Router {
    let (routes, description) = described_routes();
    let description = Arc::new(description);
    routes
        .route(
            "/api/openapi.json",
            get(move || {
                let description = Arc::clone(&description);
                async move { Json(description.as_ref().clone()) }
            }),
        )
        // Answers hold a sender's figures and keys: never cached, never
        // sniffed (the dashboard's pages have the same).
        .layer(axum::middleware::from_fn(
            crate::server::stats::security_headers,
        ))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_keys::KeyVerifier;
    use crate::server::stats::StatsState;

    /// The API with no credentials configured (off): every route it has
    /// answers the API's JSON 404; a path it lacks, axum's empty one.
    async fn serve_off() -> String {
        let pool = sqlx::MySqlPool::connect_lazy("mysql://root@127.0.0.1:9/none").unwrap();
        let stats = StatsState::new(pool.clone(), None, None, None).unwrap();
        let state = ApiState {
            stats,
            keys: KeyVerifier::new(pool.clone(), None, None),
            key_secret: None,
            events: event_feed::EventFeed::new(pool.clone()),
            letters: letter_tracker::LetterTracking::new(pool, None, String::new(), None),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router(state)).await });
        base
    }

    #[tokio::test]
    async fn every_described_operation_is_routed() {
        let (_, description) = described_routes();
        let base = serve_off().await;
        let client = reqwest::Client::new();
        let mut operations = 0;
        for (path, item) in &description.paths.paths {
            assert!(path.starts_with("/api/"), "{path} is outside /api/");
            let url = format!("{base}{}", path.replace(['{', '}'], ""));
            let methods = [
                (reqwest::Method::GET, item.get.is_some()),
                (reqwest::Method::POST, item.post.is_some()),
                (reqwest::Method::DELETE, item.delete.is_some()),
                (reqwest::Method::PUT, item.put.is_some()),
                (reqwest::Method::PATCH, item.patch.is_some()),
            ];
            for (method, described) in methods.into_iter().filter(|(_, d)| *d) {
                let _ = described;
                operations += 1;
                let response = client.request(method.clone(), &url).send().await.unwrap();
                assert_eq!(response.status(), 404, "{method} {path}");
                let text = response.text().await.unwrap_or_default();
                let body: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                assert_eq!(
                    body["error"]["code"], "not_found",
                    "{method} {path}: not routed"
                );
            }
        }
        assert!(operations >= 7, "only {operations} operations described");
        let unknown = client
            .get(format!("{base}/api/nothing"))
            .send()
            .await
            .unwrap();
        assert_eq!(unknown.status(), 404);
        assert!(
            unknown.text().await.unwrap().is_empty(),
            "the probe cannot tell"
        );
    }

    /// Routes are added only through `routes!` (which describes them): the
    /// one `.route(` of this folder is the description's own.
    #[test]
    fn no_route_is_added_without_its_description() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server/api");
        let mut plain_routes = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let code = std::fs::read_to_string(&path).unwrap();
            let code = code.split("#[cfg(test)]").next().unwrap_or_default();
            for (at, _) in code.match_indices(".route(") {
                let next = code[at..].lines().take(2).collect::<String>();
                plain_routes.push(format!("{}: {}", path.display(), next.trim()));
            }
        }
        assert_eq!(plain_routes.len(), 1, "{plain_routes:#?}");
        assert!(
            plain_routes[0].contains("/api/openapi.json"),
            "{plain_routes:#?}"
        );
    }

    #[test]
    fn the_description_is_openapi_3_1_with_the_bearer_scheme() {
        let (_, description) = described_routes();
        let json = serde_json::to_value(&description).unwrap();
        assert_eq!(json["openapi"], "3.1.0");
        assert_eq!(
            json["components"]["securitySchemes"]["bearer"]["scheme"],
            "bearer"
        );
        for path in [
            "/api/mailings/{id}/stats",
            "/api/mailings/{id}/recipients",
            "/api/keys",
        ] {
            assert!(json["paths"][path].is_object(), "{path} is not described");
        }
    }
}
