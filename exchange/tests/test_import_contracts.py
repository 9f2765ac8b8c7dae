"""The ``acyclic_modules`` import-linter contract (devtools/import_contracts.py) finds loops that cross packages
and keeps a graph without them: checked on small hand-built graphs (``make lint`` runs it on the real one)."""

import grimp

from devtools.import_contracts import AcyclicModulesContract


def _graph(imports: list[tuple[str, str]]) -> grimp.ImportGraph:
    graph = grimp.ImportGraph()
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported)
    return graph


def _check(imports: list[tuple[str, str]]):
    contract = AcyclicModulesContract(
        name="acyclic",
        session_options={"root_packages": ["apps"]},
        contract_options={"modules": ["apps.**"], "skip": ["apps.**.tests.**"]},
    )
    return contract.check(_graph(imports), verbose=False)


def test_a_loop_through_two_apps_breaks_the_contract_and_is_named_module_by_module():
    check = _check(
        [
            ("apps.b.services", "apps.a.services"),
            ("apps.a.services", "apps.a.markets"),
            ("apps.a.markets", "apps.b.services"),
            ("apps.a.models", "apps.b.models"),
        ]
    )
    assert not check.kept
    assert check.metadata["cycles"] == [("apps.a.markets", "apps.b.services", "apps.a.services", "apps.a.markets")]


def test_apps_depending_on_each_other_through_different_modules_keep_it():
    check = _check(
        [
            ("apps.a.services", "apps.b.models"),
            ("apps.b.relay", "apps.a.models"),
            ("apps.a.tests.test_x", "apps.b.relay"),
        ]
    )
    assert check.kept
    assert check.metadata["cycles"] == []


def test_a_loop_only_through_tests_is_left_out():
    check = _check([("apps.a.tests.helpers", "apps.a.services"), ("apps.a.services", "apps.a.tests.helpers")])
    assert check.kept
