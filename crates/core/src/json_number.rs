//! How the JSON we write prints a fractional number (serde `serialize_with` helpers): rounded to
//! 3 decimals, a whole value without a fraction (`75`, not serde_json's `75.0`), and `null` for NaN
//! or infinity, which JSON does not have. Readers and docs rely on `75` and `0.62` as printed.

use serde::Serializer;

/// `x` rounded to 3 decimals; `null` when it is not finite.
pub fn rounded<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    let x = *x;
    if !x.is_finite() {
        return s.serialize_none();
    }
    let r = (x * 1000.0).round() / 1000.0;
    // Whole and well within i64: as an integer, the digits Rust's `Display` of the f64 prints.
    if r.fract() == 0.0 && r.abs() < 9.0e18 {
        s.serialize_i64(r as i64)
    } else {
        s.serialize_f64(r)
    }
}

/// [`rounded`], or `null` for `None`.
pub fn rounded_opt<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match x {
        Some(x) => rounded(x, s),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize)]
    struct Numbers {
        #[serde(serialize_with = "super::rounded")]
        a: f64,
        #[serde(serialize_with = "super::rounded")]
        b: f64,
        #[serde(serialize_with = "super::rounded")]
        c: f64,
        #[serde(serialize_with = "super::rounded_opt")]
        d: Option<f64>,
        #[serde(serialize_with = "super::rounded_opt")]
        e: Option<f64>,
        #[serde(serialize_with = "super::rounded")]
        f: f64,
    }

    #[test]
    fn rounds_and_prints_whole_numbers_without_a_fraction() {
        let n = Numbers {
            a: 1.23456,
            b: 75.0,
            c: f64::NAN,
            d: None,
            e: Some(102.5),
            f: 0.62,
        };
        assert_eq!(
            serde_json::to_string(&n).unwrap(),
            r#"{"a":1.235,"b":75,"c":null,"d":null,"e":102.5,"f":0.62}"#
        );
    }
}
