//! What the model learns from, made here: weights from a seeded generator and
//! a synthetic token stream with a rule a model can learn (nothing is
//! downloaded; the GPU machine has no network).

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", 2014): small, seedable, and the same on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), from the top 53 bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller; one of the pair is dropped, which costs
    /// only speed).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // in (0, 1]: ln is finite
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.uniform() * n as f64) as usize % n.max(1)
    }
}

/// A token stream that follows `next = (MULTIPLIER * previous + 3) mod
/// vocabulary` most of the time and is noise otherwise: a model that learns
/// the rule lowers its loss well below `ln(vocabulary)`, and the noise keeps
/// the floor above zero.
pub struct TokenStream {
    rng: Rng,
    vocab: usize,
    previous: usize,
}

const MULTIPLIER: usize = 7;
/// One token in this many is drawn at random instead of by the rule.
const NOISE_ONE_IN: usize = 8;

impl TokenStream {
    pub fn new(seed: u64, vocab: usize) -> Self {
        TokenStream {
            rng: Rng::new(seed),
            vocab,
            previous: 1,
        }
    }

    pub fn next_token(&mut self) -> usize {
        let token = if self.rng.below(NOISE_ONE_IN) == 0 {
            self.rng.below(self.vocab)
        } else {
            (MULTIPLIER * self.previous + 3) % self.vocab
        };
        self.previous = token;
        token
    }

    /// `count` rows of `length + 1` tokens: the inputs are a row's first
    /// `length`, the targets its last `length`.
    pub fn batch(&mut self, count: usize, length: usize) -> Batch {
        let mut inputs = Vec::with_capacity(count * length);
        let mut targets = Vec::with_capacity(count * length);
        for _ in 0..count {
            let row: Vec<usize> = (0..=length).map(|_| self.next_token()).collect();
            inputs.extend_from_slice(&row[..length]);
            targets.extend_from_slice(&row[1..]);
        }
        Batch { inputs, targets }
    }
}

/// Token IDs, row after row (`B × T`).
pub struct Batch {
    pub inputs: Vec<usize>,
    pub targets: Vec<usize>,
}
