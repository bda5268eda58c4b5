//! The OpenAPI 3.1 description's frame ([`ApiDoc`]: title, the bearer
//! security scheme, tags); the paths and schemas come from the handlers'
//! `#[utoipa::path]` and their types as `mod.rs` registers each route.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The frame of `GET /api/openapi.json`.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "linktrack",
        description = "The operators' API of linktrack: statistics, exports, API keys and tracking letters. \
                       Every operation takes `Authorization: Bearer <key>` (an API key with \
                       the scope the operation names, or LINKTRACK_API_TOKEN); errors are \
                       `{\"error\": {\"code\", \"message\"}}`. See docs/api.md."
    ),
    modifiers(&BearerKey),
    tags(
        (name = "stats", description = "Figures, breakdowns and exports of mailings"),
        (name = "keys", description = "API keys and their scopes (scope keys:admin)"),
        (name = "events", description = "The live event stream (scope events:read)"),
        (name = "lists", description = "The suppression and tracking opt-out lists (scopes suppressions:read, suppressions:write)"),
        (name = "privacy", description = "Erasing an address everywhere (scope erase)"),
        (name = "letters", description = "Letters a sender composes and sends itself, tracked as `linktrack build` tracks its own (scope letters:write)"),
    )
)]
pub(crate) struct ApiDoc;

/// The `bearer` security scheme every operation names.
struct BearerKey;

impl Modify for BearerKey {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "An API key (`lt_…`, `linktrack keys create`) or LINKTRACK_API_TOKEN",
            ))
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}
