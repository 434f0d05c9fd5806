import { describe, expect, it } from "vitest";

const add = (a, b) => a + b;

describe("math", () => {
  it("adds", () => {
    expect(add(2, 3)).toBe(5);
  });

  it("fails on purpose", () => {
    expect(add(2, 2)).toBe(5);
  });

  it.skip("is skipped", () => {
    expect(true).toBe(false);
  });

  it("multiplies", () => {
    expect(3 * 4).toBe(12);
  });
});
