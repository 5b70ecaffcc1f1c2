//! rocm-testkit
