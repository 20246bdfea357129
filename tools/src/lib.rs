//! ds-tool: offline inspection of a ds data directory (issue 4). It will reuse the engine's
//! record codec and recovery code; nothing here re-implements the format.
