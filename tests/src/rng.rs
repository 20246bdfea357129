//! A seeded random number generator for tests that must replay a run from its seed.

/// xorshift64*: enough randomness for a replayable test, no dependency.
pub struct Rng(u64);

impl Rng {
    /// A generator whose run is fixed by `seed` (zero, which xorshift never leaves, counts
    /// as one).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}
