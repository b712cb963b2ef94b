"""Names the dead-code check (tools/deadcode.py) must not report, each with the reason.

Only callbacks a framework calls by name, fields written for a serialiser, and public
API of a library package belong here. Anything else vulture reports is dead: delete it.
This file is read by vulture, never imported.
"""

# ruff: noqa: B018, F821
# mypy: ignore-errors

# -- gRPC calls these by the RPC's name (the v2 MessagingService the official clients speak).
_.QueryRoute
_.QueryAssignment
_.Telemetry
_.Heartbeat
_.NotifyClientTermination
_.SendMessage
_.EndTransaction
_.ReceiveMessage
_.AckMessage
_.ChangeInvisibleDuration
_.PullMessage
_.GetOffset
_.UpdateOffset
_.QueryOffset
_.ForwardMessageToDeadLetterQueue
_.intercept_service  # grpc.aio.ServerInterceptor

# -- gRPC and the framed store calls (store/wire/server.frame_handlers) call these by the
# Store service's method names; RemoteStore names them as strings.
_.Append
_.Read
_.Bounds
_.CommitOffset
_.CommittedOffsets
_.DeleteOffsets
_.Topics
_.Groups
_.PutConsumeMode
_.ConsumeModes
_.Members

# -- protobuf fields set on a reply message (read by the client at the other end).
_.checksum
_.body_encoding
_.max_body_size
_.validate_message_type
_.max_attempts

# -- a module attribute the import system reads (grpc/protocol.py's placeholder package).
_.__path__

# -- http.server calls these; socketserver reads daemon_threads.
_.do_GET
_.do_POST
_.log_message
_.daemon_threads

# -- kopf reads its settings object (handlers/settings.py).
_.finalizer
_.progress_storage
_.diffbase_storage
_.level
_.server_timeout
_.client_timeout
_.error_delays
_.cancellation_polling

# -- dataclass fields serialised as a whole (dataclasses.asdict into the audit's JSON
#    report and the ConsumerGroup status); no Python code reads them one by one.
_.partitions_not_ok
_.unacked_checkpoints
_.overdue_checkpoints
_.oldest_unacked_age_ms
_.revive_positions

# -- parsed and kept in the value, not acted on:
_.read_only  # testbed volumes.Mount: the process kubelet cannot enforce readOnly (no mount
#              namespaces); the kind tier runs real read-only mounts
_.signed_headers  # auth Authorization: the v2 signature covers x-mq-date-time only

# -- public API of the popfleet_api library (used by callers outside this repository).
_.rocketmq_bits
_.DATE_FORMAT  # auth/signature: the x-mq-date-time form clients stamp (tests sign with it)

# -- the in-memory BrokerAdmin fake mirrors the real signature; it keeps no store times.
_.include_store_times

# -- an enum member found by value (grpc/convert.py: OffsetPolicy(name)).
_.TIMESTAMP

# -- the writer side of a flag the code reads: `popbroker store --settings-json` is parsed by
#    roles/store.py; its launchers (tests, bench/store_wire.py) write it with this.
_.settings_to_json

# -- parsed from a ConsumerGroup: documentation of the clients' filter (the CRD says the
#    brokers filter by what each client sends, not by this field).
_.filter_type

# -- what a value reports, asserted by the tests of the code that returns it; not yet
#    exported as metrics (StepReport of a revive step, a send receipt's delayed flag, the
#    queue lock table's takeover count, the checkpoint buffer's read of one buffered CK).
_.records_read  # StorePopState: records its replays read (a second call reads only new ones)
_.fallbacks  # BrokerAdmin: batch scans served by ScanReviveLog (an older broker)
_.bulk_decodable  # revivecolumns: how many records took the bulk path (else the bulk/
#                   per-record equivalence test would prove nothing)
_.dead_lettered
_.delayed_delivered
_.failed_tasks
_.delayed
_.takeovers
_.buffered

# -- a synchronous close for the store tests that simulate a crash between two opens (32
#    callers there); production closes through the async close().
_.close_sync

# -- logging.LogRecord attributes a filter rewrites (the logging module's formatters read
#    them): popbroker.roles.running.ClientGoneFilter.
_.levelname
_.exc_info
_.exc_text
