//! dialogues.parquet: the kept dialogues of a dataset directory as Parquet, for tools outside ragtime.
//!
//! Parquet columns (all non-null): `id`, `dataset`, `question` (utf8), `answers` (`list<utf8>`), `turn_inputs` and
//! `turn_outputs` (`list<utf8>`, x_t and y_t in order, same length), `iterations` (uint32), `final_answer` (utf8).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow_array::builder::{ListBuilder, StringBuilder, UInt32Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::autorag::dialogue::{Dialogue, Turn};

/// The Parquet schema of dialogues.parquet.
pub fn parquet_schema() -> SchemaRef {
    let list = DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)));
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("dataset", DataType::Utf8, false),
        Field::new("question", DataType::Utf8, false),
        Field::new("answers", list.clone(), false),
        Field::new("turn_inputs", list.clone(), false),
        Field::new("turn_outputs", list, false),
        Field::new("iterations", DataType::UInt32, false),
        Field::new("final_answer", DataType::Utf8, false),
    ]))
}

/// Writes `dialogues` to `path`, atomically.
pub fn write_parquet(path: &Path, dialogues: &[Dialogue]) -> Result<()> {
    let strings = |f: &dyn Fn(&Dialogue) -> &str| -> ArrayRef {
        let mut b = StringBuilder::new();
        dialogues.iter().for_each(|d| b.append_value(f(d)));
        Arc::new(b.finish())
    };
    let lists = |f: &dyn Fn(&Dialogue) -> Vec<&str>| -> ArrayRef {
        let mut b = ListBuilder::new(StringBuilder::new());
        for d in dialogues {
            for s in f(d) {
                b.values().append_value(s);
            }
            b.append(true);
        }
        Arc::new(b.finish())
    };
    let mut iters = UInt32Builder::new();
    dialogues.iter().for_each(|d| iters.append_value(d.iterations as u32));
    let columns: Vec<ArrayRef> = vec![
        strings(&|d| &d.id),
        strings(&|d| &d.dataset),
        strings(&|d| &d.question),
        lists(&|d| d.answers.iter().map(String::as_str).collect()),
        lists(&|d| d.turns.iter().map(|t| t.input.as_str()).collect()),
        lists(&|d| d.turns.iter().map(|t| t.output.as_str()).collect()),
        Arc::new(iters.finish()),
        strings(&|d| &d.final_answer),
    ];
    let batch = RecordBatch::try_new(parquet_schema(), columns)?;
    crate::io::write_parquet_batch(path, &batch)
}

/// Reads dialogues.parquet back.
pub fn read_parquet(path: &Path) -> Result<Vec<Dialogue>> {
    crate::io::catch_decoder_panic(path, "parquet file", || read_parquet_inner(path))
}

fn read_parquet_inner(path: &Path) -> Result<Vec<Dialogue>> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let f = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(f)
        .with_context(|| format!("{}: not a readable parquet file", path.display()))?
        .build()?;
    let mut out = Vec::new();
    for batch in reader {
        let b = batch.with_context(|| format!("{}: corrupt row group", path.display()))?;
        let col =
            |name: &str| b.column_by_name(name).with_context(|| format!("{}: no column {name:?}", path.display()));
        let strs = |name: &str| -> Result<Vec<String>> {
            let a = col(name)?
                .as_string_opt::<i32>()
                .with_context(|| format!("{}: column {name:?} is not utf8", path.display()))?;
            Ok((0..a.len()).map(|i| a.value(i).to_string()).collect())
        };
        let lists = |name: &str| -> Result<Vec<Vec<String>>> {
            let l = col(name)?
                .as_list_opt::<i32>()
                .with_context(|| format!("{}: column {name:?} is not a list", path.display()))?;
            (0..l.len())
                .map(|i| {
                    let v = l.value(i);
                    let s = v
                        .as_string_opt::<i32>()
                        .with_context(|| format!("{}: column {name:?} is not a list of utf8", path.display()))?;
                    Ok((0..s.len()).map(|j| s.value(j).to_string()).collect())
                })
                .collect()
        };
        let (ids, ds, qs, fa) = (strs("id")?, strs("dataset")?, strs("question")?, strs("final_answer")?);
        let (ans, ins, outs) = (lists("answers")?, lists("turn_inputs")?, lists("turn_outputs")?);
        let it = col("iterations")?
            .as_primitive_opt::<UInt32Type>()
            .with_context(|| format!("{}: column \"iterations\" is not uint32", path.display()))?;
        for i in 0..b.num_rows() {
            if ins[i].len() != outs[i].len() {
                bail!("{}: row {i}: {} turn inputs but {} outputs", path.display(), ins[i].len(), outs[i].len());
            }
            out.push(Dialogue {
                id: ids[i].clone(),
                dataset: ds[i].clone(),
                question: qs[i].clone(),
                answers: ans[i].clone(),
                turns: ins[i].iter().zip(&outs[i]).map(|(x, y)| Turn { input: x.clone(), output: y.clone() }).collect(),
                iterations: it.value(i) as usize,
                final_answer: fa[i].clone(),
            });
        }
    }
    Ok(out)
}
