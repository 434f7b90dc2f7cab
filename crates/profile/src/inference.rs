//! Profile inference (in progress).
