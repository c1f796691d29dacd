"""Terminal UI (Textual). Install with the `tui` extra."""
