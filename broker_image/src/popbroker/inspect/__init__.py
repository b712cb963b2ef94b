"""Read models over the store that the admin API and the metrics share (plain dataclasses).

  * :mod:`~popbroker.inspect.popstate` -- ``PopStateProvider``, the live POP state
    the popack/revive roles report, and ``StorePopState``, what the durable revive
    log alone tells;
  * :mod:`~popbroker.inspect.inspecting` -- a group's offsets and the revive
    statistics (``GetOffsets``, ``GetReviveStats``; the revive role's gauges).

It reads the store and the pure POP core; it builds no protobuf (the admin API
converts in :mod:`popbroker.admin.convert`) and knows no gRPC, so the metrics
never read admin responses.
"""
