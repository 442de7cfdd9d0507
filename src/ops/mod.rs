//! Operations, one folder or file per family. Each op checks its inputs, asks
//! `tune` which kernel to run, and builds a [`Plan`](crate::Plan) of
//! dispatches. Families do not import each other.

pub mod attention;
pub mod elementwise;
pub mod index;
pub mod layout;
pub mod lessons;
pub mod matmul;
pub mod quant;
pub mod rows;
