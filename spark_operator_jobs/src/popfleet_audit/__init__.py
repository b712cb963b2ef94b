"""popfleet audit jobs: lag and revive backlog of a broker fleet, on PySpark (DESIGN §5).

Modules: :mod:`.config` (the command line, parsed and validated), :mod:`.main`
(the ``popfleet-audit`` entry point), :mod:`.datasource` (the ``popfleet``
Python data source over the admin API scans), :mod:`.lagging`, :mod:`.burrow`
and :mod:`.backlog` (pure DataFrame -> DataFrame transforms), :mod:`.lag_audit`
and :mod:`.revive_backlog_audit` (the jobs), :mod:`.outputs` (files) and
:mod:`.kube` (ConsumerGroup status patches and Events).
"""
