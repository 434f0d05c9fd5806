export const add = (a: number, b: number): number => a + b;
