"""django-pgtrigger triggers that ``pgtrigger.ignore`` cannot switch off, for triggers that are invariants.

Every trigger function django-pgtrigger writes starts by asking ``_pgtrigger_should_ignore(TG_NAME)``, which reads
the session setting ``pgtrigger.ignore``: any session that may write could ``SET LOCAL pgtrigger.ignore`` to a
trigger's name and write past it, no privilege needed. Triggers built with these classes are installed from
:class:`EnforcedTriggerSql`, django-pgtrigger's template without that question (and without re-creating
``_pgtrigger_should_ignore``, which other triggers still use), and enabled always
(:class:`EnforcedAlwaysTriggerSql`), so a session in replica mode does not skip them. Switching one off then takes
``ALTER TABLE ... DISABLE TRIGGER``, a table owner's right, which reconcile sees. Every invariant trigger of the project is built with them: the ledger's
(append-only journal, balanced entries, postings that name their entry and account, permanent accounts), the
append-only audit logs, trades and liability snapshots, and a market's fixed shape.
"""

from dataclasses import dataclass

import pgtrigger
from pgtrigger import compiler


class EnforcedTriggerSql(compiler.UpsertTriggerSql):
    """The installation SQL of an enforced trigger: django-pgtrigger's v1 template
    (``pgtrigger.compiler.UpsertTriggerSql``) less the ignore check. Migrations name this class: change the template
    only in a new class."""

    def get_template(self) -> str:
        return """
            CREATE OR REPLACE FUNCTION {pgid}()
            RETURNS TRIGGER AS $$
                {declare}
                BEGIN
                    {func}
                END;
            $$ LANGUAGE plpgsql;

            DROP TRIGGER IF EXISTS {pgid} ON {table};
            CREATE {constraint} TRIGGER {pgid}
                {when} {operation} ON {table}
                {timing}
                {referencing}
                FOR EACH {level} {condition}
                EXECUTE PROCEDURE {execute};

            COMMENT ON TRIGGER {pgid} ON {table} IS '{hash}';
        """


class EnforcedAlwaysTriggerSql(EnforcedTriggerSql):
    """:class:`EnforcedTriggerSql`, the trigger then set to fire always (``ENABLE ALWAYS TRIGGER``), in replica
    sessions too. Created plainly, a trigger fires only while ``session_replication_role`` is ``origin``: a session
    allowed to set it to ``replica`` (a superuser) wrote past every invariant trigger, foreign keys included, and
    turned it back, leaving no trace in ``pg_trigger`` for reconcile to see (break-it review). Switching one off
    now takes ``ALTER TABLE ... DISABLE TRIGGER`` (or ``ENABLE TRIGGER``, back to origin-only), which reconcile's
    ``journal_append_only`` sees while it lasts."""

    def get_template(self) -> str:
        return (
            super().get_template()
            + """
            ALTER TABLE {table} ENABLE ALWAYS TRIGGER {pgid};
        """
        )


class _Enforced:
    """Compiles a django-pgtrigger trigger to :class:`EnforcedAlwaysTriggerSql`."""

    def compile(self, model) -> compiler.Trigger:
        compiled = super().compile(model)  # type: ignore[misc]  # a mixin of pgtrigger.Trigger subclasses
        return compiler.Trigger(name=compiled.name, sql=EnforcedAlwaysTriggerSql(**compiled.sql.kwargs))


class Trigger(_Enforced, pgtrigger.Trigger):
    """``pgtrigger.Trigger`` that ``pgtrigger.ignore`` cannot switch off."""


class Protect(_Enforced, pgtrigger.Protect):
    """``pgtrigger.Protect`` that ``pgtrigger.ignore`` cannot switch off."""


class ReadOnly(_Enforced, pgtrigger.ReadOnly):
    """``pgtrigger.ReadOnly`` that ``pgtrigger.ignore`` cannot switch off."""


def append_only(name: str = "immutable") -> Protect:
    """The trigger named ``name`` that refuses every UPDATE and DELETE of a table's rows."""
    return Protect(name=name, operation=pgtrigger.Update | pgtrigger.Delete)


_FUNCTION_BODY = (
    "\n                {declare}\n                BEGIN\n                    {func}\n                END;\n            "
)
"""The trigger function's body (``pg_proc.prosrc``) as :class:`EnforcedTriggerSql`'s template writes it."""

_TIMING_BITS = {"BEFORE": 2, "AFTER": 0, "INSTEAD OF": 64}
_EVENT_BITS = {"INSERT": 4, "DELETE": 8, "UPDATE": 16, "TRUNCATE": 32}
"""``pg_trigger.tgtype``'s bits (PostgreSQL's ``TRIGGER_TYPE_*``, ``src/include/catalog/pg_trigger.h``; 1 is ROW)."""


@dataclass(frozen=True)
class Installed:
    """What the catalog holds for an enforced trigger as its migration installs it: the name of its function
    (``pg_trigger.tgfoid``), that function's body, ``pg_trigger.tgtype`` (timing, level, events) and whether it has a
    ``WHEN`` condition (``tgqual``)."""

    function_name: str
    function_body: str
    tgtype: int
    has_condition: bool


def installed_form(model, name: str) -> Installed:
    """:class:`Installed` of the enforced trigger ``name`` of ``model``, from what it compiles to. Raises
    ``StopIteration`` when the model has no trigger of that name."""
    trigger = next(trigger for trigger in model._meta.triggers if trigger.name == name)
    sql = trigger.compile(model).sql.kwargs
    tgtype = (1 if sql["level"] == "ROW" else 0) + _TIMING_BITS[sql["when"]]
    tgtype += sum(_EVENT_BITS[event.strip()] for event in sql["operation"].split(" OR "))
    return Installed(
        function_name=sql["pgid"],
        function_body=_FUNCTION_BODY.format(declare=sql["declare"], func=sql["func"]),
        tgtype=tgtype,
        has_condition=bool(sql["condition"].strip()),
    )
