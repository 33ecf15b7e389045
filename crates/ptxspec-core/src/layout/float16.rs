//! 16-bit floats (IEEE half, bfloat16) from the text of a number, rounded
//! once, to nearest with ties to even, as C's `strtof` rounds a `float`.
//!
//! Rounding the text to `f64` and then to 16 bits rounds twice, which is
//! wrong where the `f64` lands exactly on a midpoint of the 16-bit format
//! that the text itself is not on. So the text goes to `f64` first (one
//! rounding, which cannot cross a 16-bit midpoint: every such midpoint is an
//! `f64`), and only where that `f64` *is* a midpoint is the text compared
//! with it exactly, in integer arithmetic.

use std::cmp::Ordering;

/// A 16-bit binary floating-point format.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Format {
    /// Stored mantissa bits (10 for half, 7 for bfloat16).
    mantissa: u32,
    /// Exponent bias (15 for half, 127 for bfloat16).
    bias: i32,
}

/// IEEE 754 binary16 (`__half`).
pub(crate) const HALF: Format = Format {
    mantissa: 10,
    bias: 15,
};
/// bfloat16 (`__nv_bfloat16`): `float`'s exponent, 7 mantissa bits.
pub(crate) const BFLOAT16: Format = Format {
    mantissa: 7,
    bias: 127,
};

impl Format {
    /// The value of the finite bit pattern `bits` (no sign).
    fn value(self, bits: u16) -> f64 {
        let exp = (bits >> self.mantissa) as i32;
        let mant = (bits & ((1 << self.mantissa) - 1)) as f64;
        let scale = |e: i32| 2f64.powi(e - self.bias - self.mantissa as i32);
        if exp == 0 {
            mant * scale(1)
        } else {
            (mant + (1u32 << self.mantissa) as f64) * scale(exp)
        }
    }

    /// The largest finite bit pattern (no sign).
    fn max_finite(self) -> u16 {
        let exp_bits = 15 - self.mantissa;
        ((((1u32 << exp_bits) - 2) << self.mantissa) | ((1 << self.mantissa) - 1)) as u16
    }

    /// The finite pattern at or below `x` (x ≥ 0, at most the largest
    /// finite value), found by bisection over the ordered patterns.
    fn floor(self, x: f64) -> u16 {
        let (mut lo, mut hi) = (0u16, self.max_finite());
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.value(mid) <= x {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }
}

/// The bits of the number `text` spells (`digits[.digits][e[±]digits]`,
/// with an optional sign), whose nearest `f64` is `v`, in `format`, rounded
/// once; `None` past the largest finite value.
pub(crate) fn from_text(format: Format, text: &str, v: f64) -> Option<u16> {
    let sign = if v.is_sign_negative() { 0x8000 } else { 0 };
    let a = v.abs();
    let max = format.value(format.max_finite());
    // Past the largest value by half an ulp or more rounds to infinity.
    let ulp_at_max = format.value(format.max_finite()) - format.value(format.max_finite() - 1);
    if a >= max + ulp_at_max / 2.0 {
        return None;
    }
    if a >= max {
        return Some(sign | format.max_finite());
    }
    let lo = format.floor(a);
    let (lo_v, hi_v) = (format.value(lo), format.value(lo + 1));
    let mid = (lo_v + hi_v) / 2.0;
    let up = match a.partial_cmp(&mid)? {
        Ordering::Less => false,
        Ordering::Greater => true,
        Ordering::Equal => match compare_exact(text, mid) {
            Some(Ordering::Less) => false,
            Some(Ordering::Greater) => true,
            // Exactly the midpoint (or text that is no decimal, which
            // `v` came from exactly): ties to even.
            _ => lo & 1 == 1,
        },
    };
    let bits = if up { lo + 1 } else { lo };
    if bits > format.max_finite() {
        return None;
    }
    Some(sign | bits)
}

/// How the magnitude of the decimal `text` compares with `m` (a finite,
/// positive `f64`), exactly; `None` when `text` is not a plain decimal.
fn compare_exact(text: &str, m: f64) -> Option<Ordering> {
    let t = text.trim_start_matches(['+', '-']);
    let (mantissa, exp10) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], t[i + 1..].parse::<i64>().ok()?),
        None => (t, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if !(int.bytes().chain(frac.bytes())).all(|b| b.is_ascii_digit()) {
        return None;
    }
    // text = digits × 10^(exp10 - frac.len())
    let digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
    let e10 = exp10.checked_sub(frac.len() as i64)?;
    // m = mant × 2^e2, exactly.
    let bits = m.to_bits();
    let raw_exp = ((bits >> 52) & 0x7ff) as i64;
    let frac_bits = bits & ((1 << 52) - 1);
    let (mant, e2) = if raw_exp == 0 {
        (frac_bits, -1074)
    } else {
        (frac_bits | (1 << 52), raw_exp - 1075)
    };
    // Bound the work by what the text can mean near an f64: exponents past
    // this are far from every midpoint, which `v` being one rules out.
    if e10.unsigned_abs() > 100_000 {
        return None;
    }
    let mut left = Big::from_digits(&digits);
    let mut right = Big::from_u64(mant);
    if e10 >= 0 {
        left.mul_pow(10, e10 as u64);
    } else {
        right.mul_pow(10, e10.unsigned_abs());
    }
    if e2 >= 0 {
        right.mul_pow(2, e2 as u64);
    } else {
        left.mul_pow(2, e2.unsigned_abs());
    }
    Some(left.cmp(&right))
}

/// A non-negative integer, little-endian in 32-bit limbs, with no high
/// zero limbs.
#[derive(PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn from_u64(v: u64) -> Big {
        let mut b = Big(vec![v as u32, (v >> 32) as u32]);
        b.trim();
        b
    }

    fn from_digits(digits: &[u8]) -> Big {
        let mut b = Big(Vec::new());
        for &d in digits {
            b.mul_small(10);
            b.add_small(d as u32);
        }
        b
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn mul_small(&mut self, k: u32) {
        let mut carry = 0u64;
        for limb in &mut self.0 {
            let p = *limb as u64 * k as u64 + carry;
            *limb = p as u32;
            carry = p >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }

    fn add_small(&mut self, k: u32) {
        let mut carry = k as u64;
        for limb in &mut self.0 {
            let s = *limb as u64 + carry;
            *limb = s as u32;
            carry = s >> 32;
            if carry == 0 {
                return;
            }
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }

    /// Multiplies by `base^n` (`base` 2 or 10).
    fn mul_pow(&mut self, base: u32, mut n: u64) {
        if self.0.is_empty() {
            return;
        }
        if base == 2 {
            let (limbs, bits) = ((n / 32) as usize, (n % 32) as u32);
            if bits > 0 {
                self.mul_small(1 << bits);
            }
            self.0.splice(0..0, std::iter::repeat_n(0, limbs));
            return;
        }
        // 10^9 fits a limb.
        while n >= 9 {
            self.mul_small(1_000_000_000);
            n -= 9;
        }
        self.mul_small(base.pow(n as u32));
    }
}

impl Ord for Big {
    fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }
}

impl PartialOrd for Big {
    fn partial_cmp(&self, other: &Big) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn half(t: &str) -> Option<u16> {
        from_text(HALF, t, t.parse().unwrap())
    }

    fn bf16(t: &str) -> Option<u16> {
        from_text(BFLOAT16, t, t.parse().unwrap())
    }

    #[test]
    fn exact_values_and_limits() {
        assert_eq!(half("1"), Some(0x3c00));
        assert_eq!(half("-2"), Some(0xc000));
        assert_eq!(half("1.5"), Some(0x3e00));
        assert_eq!(half("65504"), Some(0x7bff));
        assert_eq!(half("0.000000059604644775390625"), Some(0x0001)); // 2^-24
        assert_eq!(half("0"), Some(0));
        assert_eq!(half("-0"), Some(0x8000));
        // 65520 is the midpoint to infinity: it rounds there.
        assert_eq!(half("65519.99"), Some(0x7bff));
        assert_eq!(half("65520"), None);
        assert_eq!(bf16("1"), Some(0x3f80));
        assert_eq!(bf16("-1.5"), Some(0xbfc0));
        assert_eq!(bf16("3.3895313892515355e38"), Some(0x7f7f));
    }

    #[test]
    fn ties_go_to_even() {
        // 1 + 2^-11 is the midpoint of 1 and 1 + 2^-10: down to the even 1.
        assert_eq!(half("1.00048828125"), Some(0x3c00));
        // 1 + 3·2^-11, between odd 0x3c01 and even 0x3c02: up.
        assert_eq!(half("1.00146484375"), Some(0x3c02));
        // bfloat16: 1 + 2^-8 is the midpoint of 1 and 1 + 2^-7.
        assert_eq!(bf16("1.00390625"), Some(0x3f80));
    }

    #[test]
    fn text_off_a_midpoint_that_rounds_to_it_as_f64_is_rounded_once() {
        // Above the midpoint 1 + 2^-11 by less than half an f64 ulp: the f64
        // is the midpoint (which would round down to even), the number is
        // above it.
        let above = "1.000488281250000000000000000001";
        assert_eq!(above.parse::<f64>().unwrap(), 1.00048828125);
        assert_eq!(half(above), Some(0x3c01));
        let below = "1.001464843749999999999999999999";
        assert_eq!(below.parse::<f64>().unwrap(), 1.00146484375);
        assert_eq!(half(below), Some(0x3c01));
        let above = "1.003906250000000000000000000001";
        assert_eq!(bf16(above), Some(0x3f81));
        // Negative numbers round their magnitude the same way.
        assert_eq!(half("-1.000488281250000000000000000001"), Some(0xbc01));
        // Exponent notation, exactly on the midpoint and off it.
        assert_eq!(half("100048828125e-11"), Some(0x3c00));
        assert_eq!(half("1000488281250000000000000000001e-30"), Some(0x3c01));
    }

    #[test]
    fn subnormals() {
        // 2^-25 is the midpoint of 0 and the smallest subnormal: to even 0.
        assert_eq!(half("0.0000000298023223876953125"), Some(0));
        assert_eq!(half("0.0000000298023223876953125000000001"), Some(1));
        assert_eq!(half("0.00006097555160522461"), Some(0x03ff)); // largest subnormal
    }
}
