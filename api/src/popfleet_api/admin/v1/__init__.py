"""Generated admin API stubs (``make proto-api``); never edit them."""
