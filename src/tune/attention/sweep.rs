//! Tiles never picked by the dispatcher: the benchmark sweeps' extra
//! shapes and the shapes tests force on small adapters. Built for tests and
//! the `dev` feature only.

use super::*;

/// More tensor-core tiles for the benchmark's `--sweep-coop` (never picked
/// by the dispatcher): two 16-row fragments per subgroup (each K and V
/// fragment loaded from workgroup memory serves both, for twice the
/// accumulators per subgroup; slower on the H200 at D = 128, 64.2 and 22.8
/// TFLOP/s at 32 and 64 keys), the 64-key block (72.9), and other
/// workgroup sizes with 16-key blocks (8 subgroups: 85.1).
pub const FLASH_COOP_SWEEP: [FlashCoopTiles; 7] = [
    FlashCoopTiles {
        subgroups: 4,
        rf: 1,
        bc: 64,
    },
    FlashCoopTiles {
        subgroups: 4,
        rf: 2,
        bc: 32,
    },
    FlashCoopTiles {
        subgroups: 2,
        rf: 2,
        bc: 64,
    },
    FlashCoopTiles {
        subgroups: 8,
        rf: 1,
        bc: 16,
    },
    FlashCoopTiles {
        subgroups: 2,
        rf: 1,
        bc: 16,
    },
    FlashCoopTiles {
        subgroups: 1,
        rf: 1,
        bc: 16,
    },
    FlashCoopTiles {
        subgroups: 4,
        rf: 2,
        bc: 16,
    },
];

/// A tile the tests force (never picked by the dispatcher): two fragments
/// per subgroup within 32 KiB, whose Q staging takes several passes with a
/// partial last one at D = 128 (the emulated kernel runs it on lavapipe).
pub const FLASH_COOP_TEST_TILES: [FlashCoopTiles; 1] = [FlashCoopTiles {
    subgroups: 2,
    rf: 2,
    bc: 32,
}];

/// Variants the benchmark sweeps (`attention_sweep --decode-sweep` in wgtile-dev).
/// 0: the previous engineer's shape (256 invocations, 4 per unit); 1: the
/// default for f16 D = 128; 2: the default for f32 D = 128 (LK = 8); 3: V
/// loaded in its own block (fewer registers); 4: 64 invocations, 16 per
/// unit; 5-6: one 32-wide workgroup (a single NVIDIA warp: barriers nearly
/// free, the "each invocation group streams its own keys" structure without
/// subgroup operations), 32 per unit; 7: 128 keys per block (LK = 2).
pub const DECODE_SWEEP: [DecodeTiles; 8] = [
    DecodeTiles {
        threads: 256,
        lk: 4,
        prefetch_v: true,
        per_unit: 4,
    },
    DecodeTiles {
        threads: 128,
        lk: 4,
        prefetch_v: true,
        per_unit: 8,
    },
    DecodeTiles {
        threads: 128,
        lk: 8,
        prefetch_v: true,
        per_unit: 8,
    },
    DecodeTiles {
        threads: 128,
        lk: 4,
        prefetch_v: false,
        per_unit: 8,
    },
    DecodeTiles {
        threads: 64,
        lk: 4,
        prefetch_v: true,
        per_unit: 16,
    },
    DecodeTiles {
        threads: 32,
        lk: 4,
        prefetch_v: true,
        per_unit: 32,
    },
    DecodeTiles {
        threads: 32,
        lk: 2,
        prefetch_v: true,
        per_unit: 32,
    },
    DecodeTiles {
        threads: 256,
        lk: 2,
        prefetch_v: false,
        per_unit: 4,
    },
];

/// More tile shapes the benchmark's `--sweep-tiles` times on GPUs (never
/// picked by the dispatcher): wider key blocks, the 8-rows-per-invocation
/// tile at 128 rows (10x slower than 4 rows on the H200: register spills),
/// a 128-invocation 32-row tile. Where one beats [`FLASH_CANDIDATES`] on a
/// GPU, it belongs there.
pub const SWEEP_TILES: [FlashTiles; 3] = [
    FlashTiles {
        br: 64,
        tr: 4,
        nc: 32,
        td: 4,
        dk: 16,
        vk: 16,
    },
    FlashTiles {
        br: 128,
        tr: 8,
        nc: 16,
        td: 8,
        dk: 16,
        vk: 16,
    },
    FlashTiles {
        br: 32,
        tr: 4,
        nc: 16,
        td: 8,
        dk: 16,
        vk: 16,
    },
];

/// Tile shapes the tests force on small adapters to cover the 8-rows-per-
/// invocation path of the largest candidate within 32 KiB.
pub const TEST_TILES: [FlashTiles; 1] = [FlashTiles {
    br: 64,
    tr: 8,
    nc: 16,
    td: 8,
    dk: 16,
    vk: 16,
}];
