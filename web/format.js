// format.js - numbers and shapes as the page writes them.

/**
 * The shortest decimal that reads back as the same float32, in the style attnd writes JSON
 * (plain when the first digit's decimal exponent is in [-4, 9), else 1.5e-7): the value on
 * hover is the number the API returned, character for character.
 */
export function f32(x) {
  if (Number.isNaN(x)) return "NaN";
  if (x === Infinity) return "inf";
  if (x === -Infinity) return "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const want = Math.fround(x);
  let e = want.toExponential(8);
  for (let p = 0; p <= 8; p++) {
    const s = want.toExponential(p);
    if (Math.fround(Number(s)) === want) {
      e = s;
      break;
    }
  }
  const [mant, expText] = e.split("e");
  const exp = Number(expText), neg = mant[0] === "-";
  const digits = mant.replace("-", "").replace(".", "").replace(/0+$/, "") || "0";
  let out;
  if (exp >= -4 && exp < 9) {
    if (exp < 0) out = "0." + "0".repeat(-exp - 1) + digits;
    else if (digits.length <= exp + 1) out = digits + "0".repeat(exp + 1 - digits.length);
    else out = digits.slice(0, exp + 1) + "." + digits.slice(exp + 1);
  } else {
    out = digits[0] + (digits.length > 1 ? "." + digits.slice(1) : "") + "e" + exp;
  }
  return neg ? "-" + out : out;
}

function tidy(s) {
  let [mant, exp] = s.split("e");
  if (mant.includes(".")) mant = mant.replace(/0+$/, "").replace(/\.$/, "");
  return exp === undefined ? mant : `${mant}e${exp.replace("+", "")}`;
}

/** A few significant digits, for labels and legends. */
export function short(x, digits = 3) {
  if (!Number.isFinite(x)) return f32(x);
  if (x === 0) return "0";
  const a = Math.abs(x);
  if (a >= 1e4 || a < 1e-3) return tidy(x.toExponential(digits - 1).replace("e+", "e"));
  return tidy(x.toPrecision(digits));
}

/** "[1, 4, 6, 16]" and, with axes, "[N=1, H=4, L=6, D=16]". */
export function shapeText(shape, axes) {
  if (!axes) return `[${shape.join(", ")}]`;
  return `[${shape.map((d, i) => `${axes[i]}=${d}`).join(", ")}]`;
}

/** Bytes in a human unit: 1.5 MB. */
export function bytesText(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  if (n < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MB`;
  return `${(n / 1024 ** 3).toFixed(1)} GB`;
}

/** 4194304 -> "4,194,304". */
export function count(n) {
  return Number(n).toLocaleString("en-US");
}
