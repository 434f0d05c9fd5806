import { expect, test } from "vitest";

const add = (a, b) => a + b;

test("adds small numbers", () => {
  expect(add(2, 2)).toBe(4);
});

test("fails on purpose", () => {
  expect(add(2, 2)).toBe(5);
});
