//! What the stats handlers share ([`StatsState`]): the pool, the access
//! rules, the live layer, the image proxy and the dashboard's templates.

use super::credentials::Auth;
use super::error::StatsError;
use super::page_templates::templates;
use crate::live::Live;
use crate::server::image::ImageProxy;
use sqlx::MySqlPool;
use std::sync::Arc;

/// What the stats handlers share.
#[derive(Clone)]
pub struct StatsState {
    pub pool: MySqlPool,
    pub auth: Auth,
    /// The Redis live layer, when `REDIS_URL` is set.
    pub live: Option<Live>,
    /// The server's image proxy: the click map shows the creative's images
    /// through it (`creative_images`); `None`: placeholders.
    pub images: Option<Arc<ImageProxy>>,
    pub(super) templates: Arc<minijinja::Environment<'static>>,
}

impl StatsState {
    /// `api_token` unset (or blank) turns the API and dashboard off;
    /// `secret` unset turns the browser login off.
    pub fn new(
        pool: MySqlPool,
        api_token: Option<&str>,
        secret: Option<&str>,
        live: Option<Live>,
    ) -> Result<StatsState, StatsError> {
        Ok(StatsState {
            pool,
            auth: Auth::new(api_token, secret),
            live,
            images: None,
            templates: Arc::new(templates()?),
        })
    }
}
