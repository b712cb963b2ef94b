"""ScanReviveLogBatches: the revive log as Arrow batches, equal to ScanReviveLog, any broker.

A current broker answers the batch RPC; the batches hold exactly what ScanReviveLog says
record by record (every kind, malformed ones too), resume where they ended and stop at
``max_records``. An older broker -- a real gRPC server that serves ScanReviveLog over the
same store but has no batch RPC (UNIMPLEMENTED) -- or one that answers with a batch format
the client does not know gets the same batches: the client falls back to ScanReviveLog.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from popbroker.admin.servicer import AdminServicer
from popbroker.inspect.popstate import StorePopState
from popfleet_api import errors, revivebatches
from popfleet_api.admin.v1 import admin_pb2 as pb
from popfleet_api.admin.v1 import admin_pb2_grpc as pb_grpc
from popfleet_api.client import BrokerAdmin
from tests.integration.admin.conftest import Broker
from tests.integration.admin.test_scans_paged_and_resumable import _revive_log_of_every_kind

SERVICE = "popfleet.admin.v1.BrokerAdmin"


async def _batches(
    admin: BrokerAdmin, queue: int, **kwargs: int
) -> list[revivebatches.ReviveLogBatch]:
    return [batch async for batch in admin.scan_revive_log_batches(queue, **kwargs)]


async def _records_one_by_one(admin: BrokerAdmin, queue: int) -> Any:
    records = [r async for page in admin.scan_revive_log(queue) for r in page.records]
    return revivebatches.batch_from_records(records)


def _rows(batches: list[revivebatches.ReviveLogBatch]) -> list[dict[str, object]]:
    return [row for batch in batches for row in batch.records.to_pylist()]


@pytest.mark.timeout(60)
async def test_batches_hold_what_the_record_scan_says(admin: BrokerAdmin, broker: Broker) -> None:
    await _revive_log_of_every_kind(broker)
    batches = await _batches(admin, 1)
    assert admin.fallbacks == 0
    [batch] = batches
    assert (batch.next_queue_offset, batch.end_of_log, batch.max_queue_offset) == (6, True, 6)
    assert batch.records.equals(await _records_one_by_one(admin, 1))
    kinds = [revivebatches.KIND_NAMES[k] for k in batch.records.column("kind").to_pylist()]
    assert kinds == ["CHECKPOINT", "ACK", "BATCH_ACK", "DELAY", "MALFORMED", "MALFORMED"]
    assert batch.records.column("queue_offsets").to_pylist()[:3] == [[5, 7, 8], [7], [5, 8]]


@pytest.mark.timeout(60)
async def test_batches_resume_and_stop_at_max_records(admin: BrokerAdmin, broker: Broker) -> None:
    await _revive_log_of_every_kind(broker)
    first = await _batches(admin, 1, batch_records=2, max_records=3)
    assert [b.records.num_rows for b in first] == [2, 1]
    assert first[-1].next_queue_offset == 3
    rest = await _batches(admin, 1, from_queue_offset=3, batch_records=2)
    assert [b.records.num_rows for b in rest] == [2, 1]
    assert rest[-1].end_of_log
    whole = (await _records_one_by_one(admin, 1)).to_pylist()
    assert _rows(first) + _rows(rest) == whole
    empty = await _batches(admin, 0)
    assert [(b.records.num_rows, b.end_of_log) for b in empty] == [(0, True)]


@pytest.mark.timeout(60)
async def test_batch_scan_refuses_bad_input(admin: BrokerAdmin, broker: Broker) -> None:
    await _revive_log_of_every_kind(broker)
    with pytest.raises(errors.InvalidArgument):
        await _batches(admin, 1, batch_records=65_537)
    with pytest.raises(errors.NotFound):
        await _batches(admin, 9)
    with pytest.raises(errors.OutOfRange):
        await _batches(admin, 1, from_queue_offset=7)


class _UnknownFormat(AdminServicer):
    """A broker whose batches come in a format this client does not know (the field unset)."""

    async def ScanReviveLogBatches(
        self, request: pb.ScanReviveLogBatchesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReviveLogBatch]:
        yield pb.ReviveLogBatch(revive_queue_id=request.revive_queue_id, record_count=6)


async def _serve(broker: Broker, *, old: bool) -> tuple[grpc.aio.Server, str]:
    servicer = (AdminServicer if old else _UnknownFormat)(
        broker.store,
        pop_state=StorePopState(broker.store, clock=broker.clock),
        clock=broker.clock,
    )
    server = grpc.aio.server()
    handlers = {
        "GetBrokerInfo": grpc.unary_unary_rpc_method_handler(
            servicer.GetBrokerInfo,
            request_deserializer=pb.GetBrokerInfoRequest.FromString,
            response_serializer=pb.BrokerInfo.SerializeToString,
        ),
        "ScanReviveLog": grpc.unary_stream_rpc_method_handler(
            servicer.ScanReviveLog,
            request_deserializer=pb.ScanReviveLogRequest.FromString,
            response_serializer=pb.ReviveLogPage.SerializeToString,
        ),
    }
    if not old:
        handlers["ScanReviveLogBatches"] = grpc.unary_stream_rpc_method_handler(
            servicer.ScanReviveLogBatches,
            request_deserializer=pb.ScanReviveLogBatchesRequest.FromString,
            response_serializer=pb.ReviveLogBatch.SerializeToString,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def _raw_batch_status(target: str) -> grpc.StatusCode:
    async with grpc.aio.insecure_channel(target) as channel:
        call = pb_grpc.BrokerAdminStub(channel).ScanReviveLogBatches(
            pb.ScanReviveLogBatchesRequest(revive_queue_id=1)
        )
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await call.read()
    code: grpc.StatusCode = failed.value.code()
    return code


@pytest.mark.parametrize("old", [True, False], ids=["without-the-rpc", "unknown-format"])
@pytest.mark.timeout(60)
async def test_an_older_broker_gets_the_record_scan(
    admin: BrokerAdmin, broker: Broker, old: bool
) -> None:
    await _revive_log_of_every_kind(broker)
    expected = await _records_one_by_one(admin, 1)
    server, target = await _serve(broker, old=old)
    try:
        async with BrokerAdmin(target, timeout_s=5.0) as client:
            batches = await _batches(client, 1)
            assert client.fallbacks == 1
            assert revivebatches.KIND_NAMES[batches[0].records.column("kind")[0].as_py()]
            assert [b.end_of_log for b in batches][-1]
            assert _rows(batches) == expected.to_pylist()
            resumed = await _batches(client, 1, from_queue_offset=2, max_records=3)
            assert _rows(resumed) == expected.to_pylist()[2:5]
        if old:  # the RPC itself is unknown to this server
            assert await _raw_batch_status(target) == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await server.stop(None)
