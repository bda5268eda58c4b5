//! Schemas of answers whose fields are the store's types (the stats
//! summary, the breakdowns): their top-level fields are named and typed,
//! deeper parts are open objects (docs/operate.md describes them), so the
//! description holds what the answer holds without the store knowing
//! about OpenAPI.

use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::RefOr;

/// A field's JSON type in [`open_object`]; `nullable` ones may be `null`.
#[derive(Clone)]
pub(crate) struct Field {
    pub name: &'static str,
    pub kind: Type,
    pub nullable: bool,
}

pub(crate) const fn field(name: &'static str, kind: Type) -> Field {
    Field {
        name,
        kind,
        nullable: false,
    }
}

pub(crate) const fn nullable(name: &'static str, kind: Type) -> Field {
    Field {
        name,
        kind,
        nullable: true,
    }
}

/// An object with these fields, all present, and maybe more.
pub(crate) fn open_object(description: &str, fields: &[Field]) -> RefOr<Schema> {
    let mut object = ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(description));
    for f in fields {
        let kind = if f.nullable {
            SchemaType::from_iter([f.kind.clone(), Type::Null])
        } else {
            SchemaType::new(f.kind.clone())
        };
        object = object
            .property(f.name, ObjectBuilder::new().schema_type(kind))
            .required(f.name);
    }
    object.into()
}
