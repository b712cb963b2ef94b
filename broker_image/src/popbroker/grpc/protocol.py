"""The v2 protocol modules shipped by the official Python client, in one place.

``rocketmq.grpc_protocol`` has no type stubs, so everything imported from it
is ``Any`` to mypy; the rest of the package imports these names from here and
never from ``rocketmq`` directly, so a change of the client package touches
one file.

Why the modules are loaded by hand: the broker needs only the generated
modules (``definition_pb2``, ``service_pb2``, ``service_pb2_grpc``), but a plain
``from rocketmq.grpc_protocol import ...`` first executes the client package's
``rocketmq/__init__.py``, which imports the whole client and, through
``rocketmq/v5/log/log_config.py``, runs ``os.makedirs("~/logs/rocketmq_python")``
and ``logging.config.dictConfig(...)`` at import time. In a broker pod
(read-only root filesystem, ``HOME=/nonexistent``) that ``makedirs`` raises and
the role dies before it serves; anywhere else it writes under ``$HOME`` and
``dictConfig`` closes the handlers the process had already set up.

So, when ``rocketmq`` is not imported yet:

1. find the installed package with ``importlib.util.find_spec`` (which reads
   the file system, never executes the package);
2. put a bare, empty module named ``rocketmq`` with the package's
   ``__path__`` into ``sys.modules``, so the import system can find the
   subpackage without running the real ``__init__``;
3. import ``rocketmq.grpc_protocol`` and its three modules. The subpackage's
   own ``__init__`` only imports those generated modules (relative imports,
   no I/O, no logging), and the generated modules only import protobuf, grpc
   and each other;
4. remove the bare ``rocketmq`` again (only if it is still ours).

A later ``import rocketmq`` (the tests run the official client in the same
process as in-process brokers) then executes the real package, whose
``from rocketmq.grpc_protocol import ...`` finds the modules already in
``sys.modules`` and reuses them: each descriptor is registered once. Import the
subpackage by name (``from rocketmq.grpc_protocol import ...``, as the client
does): as an attribute of a package imported after this module it is unset.

When ``rocketmq`` is already imported (a process that uses the client anyway)
its modules are simply reused. Tested in
``tests/integration/broker/test_roles_start_on_a_read_only_root.py``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

_PACKAGE = "rocketmq"
_PROTOCOL = "rocketmq.grpc_protocol"


def _import_generated() -> tuple[Any, Any, Any]:
    """The three generated modules, without running the client package's ``__init__``."""
    bare: types.ModuleType | None = None
    if _PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(_PACKAGE)
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError(f"the {_PACKAGE} package (rocketmq-python-client) is not installed")
        bare = types.ModuleType(_PACKAGE, "placeholder while popbroker loads the v2 protocol")
        bare.__path__ = list(spec.submodule_search_locations)
        sys.modules[_PACKAGE] = bare
    try:
        return (
            importlib.import_module(f"{_PROTOCOL}.definition_pb2"),
            importlib.import_module(f"{_PROTOCOL}.service_pb2"),
            importlib.import_module(f"{_PROTOCOL}.service_pb2_grpc"),
        )
    finally:
        if bare is not None and sys.modules.get(_PACKAGE) is bare:
            del sys.modules[_PACKAGE]


definition, service, service_grpc = _import_generated()

Code = definition.Code
MessagingServiceServicer = service_grpc.MessagingServiceServicer
add_servicer_to_server = service_grpc.add_MessagingServiceServicer_to_server
MessagingServiceStub = service_grpc.MessagingServiceStub

__all__ = [
    "Code",
    "MessagingServiceServicer",
    "MessagingServiceStub",
    "add_servicer_to_server",
    "definition",
    "service",
    "service_grpc",
]
