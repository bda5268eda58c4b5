//! Personalisation with minijinja (stub).
#[derive(Debug)]
pub struct Template;
#[derive(Debug, thiserror::Error)]
#[error("x")]
pub struct TemplateError;
#[derive(Debug, thiserror::Error)]
#[error("x")]
pub struct RenderError;
