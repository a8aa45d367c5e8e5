"""The JSON contract: one schema_version convention, a shipped schema per document that matches
`autoplace.contract`, every `--json` output valid against its schema, and plan entries of
`search --json` accepted by `--plan-file`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autoplace import SCHEMA_VERSION, contract
from autoplace.cli import app
from autoplace.errors import InputError
from autoplace.export.planfile import read_plan_file

jsonschema = pytest.importorskip("jsonschema")


def _json(args: list[str]) -> dict:
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output[-800:]
    return json.loads(r.stdout)


def test_shipped_schema_files_are_the_contract_module():
    for name in contract.DOCUMENTS:
        shipped = json.loads((contract.schema_dir() / f"{name}.json").read_text(encoding="utf-8"))
        assert shipped == contract.schema(name), f"{name}.json is stale: run autoplace.contract.write_all()"
        jsonschema.Draft202012Validator.check_schema(shipped)
    assert sorted(p.stem for p in contract.schema_dir().glob("*.json")) == sorted(contract.DOCUMENTS)


@pytest.fixture(scope="module")
def search_doc():
    return _json(["search", "--model", "7b", "--gpus", "8", "--top-k", "2", "--json"])


def test_every_json_output_validates(search_doc, tmp_path):
    docs = {
        "search": search_doc,
        "estimate": _json(["estimate", "--model", "7b", "--gpus", "8", "--plan", "tp=2,zero=1", "--json"]),
        "compare": _json(["compare", "--model", "7b", "--gpus", "8", "--plan", "tp=2", "--plan", "zero=3", "--json"]),
        "sweep": _json(["sweep", "--model", "7b", "--gpus", "8", "--tokens", "1B", "--json"]),
        "list": _json(["list", "models", "--json"]),
    }
    (tmp_path / "s.json").write_text(json.dumps(search_doc))
    docs["export"] = _json(["export", "--plan-file", str(tmp_path / "s.json"), "--launcher", "torchrun",
                            "--out", str(tmp_path / "out"), "--json"])
    docs["plan"] = search_doc["plans"][0]["plan_file"]
    from autoplace.validate import validate_records
    from tests.test_validate import gpt_record
    docs["validate"] = validate_records([gpt_record()])
    # an illegal plan and a search that finds nothing are documents too
    r = CliRunner().invoke(app, ["estimate", "--model", "7b", "--gpus", "8", "--plan", "tp=3", "--json"])
    docs_extra = [("estimate", json.loads(r.stdout))]
    for name, doc in [*docs.items(), *docs_extra]:
        assert doc["schema_version"] == SCHEMA_VERSION, name
        contract.validate(doc, name)
    assert docs_extra[0][1]["legal"] is False


def test_a_document_breaking_its_schema_is_caught(search_doc):
    bad = json.loads(json.dumps(search_doc))
    bad["plans"][0]["plan"]["zero"] = 5
    with pytest.raises(jsonschema.ValidationError):
        contract.validate(bad, "search")


def test_search_json_is_a_plan_file(search_doc, tmp_path):
    whole, entry = tmp_path / "search.json", tmp_path / "entry.json"
    whole.write_text(json.dumps(search_doc))
    second = search_doc["plans"][1]
    entry.write_text(json.dumps(second))
    m, hw, train, plan, world, _ = read_plan_file(whole)
    assert world == 8 and m.name == "Llama-2-7B" and plan.to_dict() == search_doc["plans"][0]["plan"]
    m, hw, train, plan, world, _ = read_plan_file(entry)
    assert plan.to_dict() == second["plan"] and train.seq_len == second["training"]["seq_len"]
    # re-estimating the entry gives the entry's own numbers
    again = _json(["estimate", "--plan-file", str(entry), "--json"])
    assert again["time"]["step_s"] == pytest.approx(second["time"]["step_s"], rel=1e-12)
    assert again["memory"]["peak_bytes"] == pytest.approx(second["memory"]["peak_bytes"], rel=1e-12)


@pytest.mark.parametrize("ver,ok", [("1.0", True), ("1.7", True), (1, True), ("2.0", False), ("one", False),
                                    (True, False), (None, False), ("1", False)])
def test_one_version_convention(ver, ok):
    if ok:
        contract.check_version(ver, "doc")
    else:
        with pytest.raises(InputError):
            contract.check_version(ver, "doc")


def test_an_estimate_document_is_refused_as_a_plan_file(tmp_path):
    doc = _json(["estimate", "--model", "7b", "--gpus", "8", "--plan", "tp=2", "--json"])
    p = tmp_path / "e.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="estimate document holds no plan file"):
        read_plan_file(p)
