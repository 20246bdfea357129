//! ds-bench: a load generator for any Durable Streams server (issue 5).
