"""The ``popfleet.admin.v1`` proto package."""
