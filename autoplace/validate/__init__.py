"""`autoplace validate`: rebuild published training runs from their records and compare predictions.

    from autoplace.validate import load_records, validate_records
    doc = validate_records(load_records("shared/validation/public_runs.json"))
    doc["summary"]["by_source"]["korthikanti2022"]

`doc` is `{records: [...], summary: {...}, not_compared: [...], mapping: {id: ...}}`; every entry of
`records` is `{id, source, metric, measured, predicted, error_pct, ...}` (one per compared metric) or
`{id, source, skipped: reason}`. See autoplace.validate.mapping (record → specs), .flops (FLOP
conventions), .compare (per record type) and .summary.
"""

from __future__ import annotations

from autoplace.errors import InputError
from autoplace.io import read_json
from autoplace.validate.compare import Result, evaluate_record, source_definitions
from autoplace.validate.summary import summarize

__all__ = ["load_records", "validate_records", "run", "document", "Result", "evaluate_record", "summarize"]


def load_records(path) -> list:
    """Records from a JSON file: a list, or an object with a `records` list. InputError otherwise."""
    data = read_json(path, "--records", "pass a file in the shared/validation/public_runs.json schema")
    if isinstance(data, dict) and isinstance(data.get("records"), list):
        data = data["records"]
    if not isinstance(data, list):
        raise InputError(f"--records: '{path}' must hold a JSON list of records")
    return data


def run(records) -> tuple[list[Result], dict]:
    records = list(records)
    defs = source_definitions(records)
    results = [evaluate_record(r, defs) for r in records]
    return results, summarize(results)


def validate_records(records) -> dict:
    return document(*run(records))


def document(results, summary) -> dict:
    """The JSON document of a run: {schema_version, records, summary, not_compared, mapping}."""
    from autoplace.contract import SCHEMA_VERSION
    out, not_compared, mapping = [], [], {}
    for r in results:
        if r.skipped is not None:
            out.append({"id": r.id, "source": r.source, "skipped": r.skipped})
        else:
            out.extend(r.entries)
        not_compared.extend({"id": r.id, **n} for n in r.not_compared)
        if r.mapping is not None:
            mapping[r.id] = r.mapping
    return {"schema_version": SCHEMA_VERSION, "records": out, "summary": summary,
            "not_compared": not_compared, "mapping": mapping}
