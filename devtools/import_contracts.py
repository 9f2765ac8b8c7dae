"""import-linter contract types of our own (``[tool.importlinter] contract_types`` in pyproject.toml).

:class:`AcyclicModulesContract` (``acyclic_modules``): no module imports itself round a loop, whichever packages
the loop crosses. The built-in ``acyclic_siblings`` contract compares the children of one package at a time, so
``apps.a.x -> apps.b.y -> apps.a.z -> apps.a.x``-style loops through two apps escape it; this one follows every
import between the modules themselves (an app's package ``__init__`` counts as a module importing what it
re-exports). Tests and migrations are left out.
"""

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

MAX_CYCLES_SHOWN = 10


class AcyclicModulesContract(Contract):
    """Kept when no module under ``modules`` (module expressions such as ``apps.**``) reaches itself by imports.

    Options: ``modules`` (required), ``skip`` (module expressions left out, e.g. ``apps.**.tests.**``).
    Broken: each loop is shown once, as its chain of modules starting from the import that closes it.
    """

    type_name = "acyclic_modules"

    modules = fields.ListField(subfield=fields.ModuleExpressionField())
    skip = fields.ListField(subfield=fields.ModuleExpressionField(), required=False)

    def _matching(self, graph: ImportGraph, expressions) -> set[str]:
        return {module for expression in expressions or () for module in graph.find_matching_modules(str(expression))}

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        """Find every direct import ``a -> b`` whose ``b`` leads back to ``a``; one chain per distinct loop."""
        modules = self._matching(graph, self.modules) - self._matching(graph, self.skip)
        cycles: list[tuple[str, ...]] = []
        seen: set[frozenset[str]] = set()
        for importer in sorted(modules):
            for imported in sorted(graph.find_modules_directly_imported_by(importer) & modules):
                chain = graph.find_shortest_chain(importer=imported, imported=importer)
                if chain is None or not set(chain) <= modules:
                    continue
                loop = frozenset(chain)
                if loop not in seen:
                    seen.add(loop)
                    cycles.append((importer, *chain))
        return ContractCheck(kept=not cycles, warnings=[], metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        """Print each loop as ``a -> b -> ... -> a``."""
        cycles = check.metadata["cycles"]
        output.print_error(f"{len(cycles)} import loop(s) between modules:")
        for cycle in cycles[:MAX_CYCLES_SHOWN]:
            output.print_error("- " + " -> ".join(cycle))
        if len(cycles) > MAX_CYCLES_SHOWN:
            output.print_error(f"(and {len(cycles) - MAX_CYCLES_SHOWN} more)")
