//! The Arrow schema of a shard (documented in [`super`]), and conversion between examples and columns.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use arrow_array::builder::{Float32Builder, ListBuilder, StringBuilder, UInt32Builder, UInt8Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::HalluExample;

/// The Arrow schema of a shard (documented in [`super`]).
pub fn schema() -> SchemaRef {
    let list = DataType::List(Arc::new(Field::new_list_field(DataType::Float32, true)));
    let mut fields = Vec::new();
    for name in ["article_id", "title", "template"] {
        fields.push(Field::new(name, DataType::Utf8, false));
    }
    fields.push(Field::new("trunc_offset", DataType::UInt32, false));
    for name in ["entity_label", "original_entity", "generated_entity", "continuation"] {
        fields.push(Field::new(name, DataType::Utf8, false));
    }
    fields.push(Field::new("label", DataType::UInt8, false));
    fields.push(Field::new("rule", DataType::Utf8, false));
    fields.push(Field::new("entropy_last", DataType::Float32, false));
    fields.push(Field::new("entropy_entity_mean", DataType::Float32, false));
    for name in ["hidden_final_last", "hidden_mean_last", "hidden_final_entity", "hidden_mean_entity"] {
        fields.push(Field::new(name, list.clone(), false));
    }
    Arc::new(Schema::new(fields))
}

pub(super) fn to_batch(rows: &[HalluExample]) -> Result<RecordBatch> {
    fn strings(rows: &[HalluExample], f: impl Fn(&HalluExample) -> &str) -> ArrayRef {
        let mut b = StringBuilder::new();
        for r in rows {
            b.append_value(f(r));
        }
        Arc::new(b.finish())
    }
    fn floats(rows: &[HalluExample], f: impl Fn(&HalluExample) -> f32) -> ArrayRef {
        let mut b = Float32Builder::new();
        for r in rows {
            b.append_value(f(r));
        }
        Arc::new(b.finish())
    }
    fn lists(rows: &[HalluExample], f: impl Fn(&HalluExample) -> &[f32]) -> ArrayRef {
        let mut b = ListBuilder::new(Float32Builder::new());
        for r in rows {
            b.values().append_slice(f(r));
            b.append(true);
        }
        Arc::new(b.finish())
    }
    let mut offsets = UInt32Builder::new();
    let mut labels = UInt8Builder::new();
    for r in rows {
        offsets.append_value(r.trunc_offset);
        labels.append_value(r.label);
    }
    let columns: Vec<ArrayRef> = vec![
        strings(rows, |r| &r.article_id),
        strings(rows, |r| &r.title),
        strings(rows, |r| &r.template),
        Arc::new(offsets.finish()),
        strings(rows, |r| &r.entity_label),
        strings(rows, |r| &r.original_entity),
        strings(rows, |r| &r.generated_entity),
        strings(rows, |r| &r.continuation),
        Arc::new(labels.finish()),
        strings(rows, |r| &r.rule),
        floats(rows, |r| r.entropy_last),
        floats(rows, |r| r.entropy_entity_mean),
        lists(rows, |r| &r.hidden_final_last),
        lists(rows, |r| &r.hidden_mean_last),
        lists(rows, |r| &r.hidden_final_entity),
        lists(rows, |r| &r.hidden_mean_entity),
    ];
    Ok(RecordBatch::try_new(schema(), columns)?)
}

pub(super) fn column<'a>(batch: &'a RecordBatch, name: &str, file: &Path) -> Result<&'a ArrayRef> {
    batch.column_by_name(name).with_context(|| format!("{}: no column {name:?}", file.display()))
}

pub(super) fn str_col(batch: &RecordBatch, name: &str, file: &Path) -> Result<Vec<String>> {
    let c = column(batch, name, file)?;
    let a = c.as_string_opt::<i32>().with_context(|| format!("{}: column {name:?} is not utf8", file.display()))?;
    Ok((0..a.len()).map(|i| a.value(i).to_string()).collect())
}

pub(super) fn f32_col(batch: &RecordBatch, name: &str, file: &Path) -> Result<Vec<f32>> {
    let c = column(batch, name, file)?;
    let a = c
        .as_primitive_opt::<Float32Type>()
        .with_context(|| format!("{}: column {name:?} is not float32", file.display()))?;
    Ok(a.values().to_vec())
}

pub(super) fn list_col(batch: &RecordBatch, name: &str, file: &Path) -> Result<Vec<Vec<f32>>> {
    let c = column(batch, name, file)?;
    let l = c.as_list_opt::<i32>().with_context(|| format!("{}: column {name:?} is not a list", file.display()))?;
    (0..l.len())
        .map(|i| {
            let v = l.value(i);
            let p = v
                .as_primitive_opt::<Float32Type>()
                .with_context(|| format!("{}: column {name:?} is not a list of float32", file.display()))?;
            Ok(p.values().to_vec())
        })
        .collect()
}
