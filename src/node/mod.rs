//! Node registration, status and lease (being written).
