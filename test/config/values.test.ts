import { describe, expect, it } from 'vitest';
import { formatGoDuration, parseCsvRecord, parseGoDurationNs, parseGoInt, parseGoUint } from '../../src/config/values.js';

describe('Go duration formatting (time.Duration.String)', () => {
  it.each<[number, string]>([
    [0, '0s'],
    [0.000001, '1ns'],
    [0.0015, '1.5µs'],
    [300, '300ms'],
    [1.5, '1.5ms'],
    [1000, '1s'],
    [30_000, '30s'],
    [60_000, '1m0s'],
    [128_000, '2m8s'],
    [480_000, '8m0s'],
    [3_600_000, '1h0m0s'],
    [5_400_500, '1h30m0.5s'],
    [-1000, '-1s'],
  ])('%d ms -> %s', (ms, text) => {
    expect(formatGoDuration(ms)).toBe(text);
  });
});

describe('Go duration parsing keeps nanoseconds', () => {
  it.each<[string, bigint]>([
    ['1ns', 1n],
    ['1.000000001s', 1_000_000_001n],
    ['2562047h47m16.854775807s', 9_223_372_036_854_775_807n],
    ['-2562047h47m16.854775808s', -9_223_372_036_854_775_808n],
  ])('%s', (text, ns) => {
    expect(parseGoDurationNs(text)).toBe(ns);
  });

  it('rejects overflow past int64', () => {
    expect(() => parseGoDurationNs('2562047h47m16.854775808s')).toThrow('time: invalid duration');
  });
});

describe('Go integers', () => {
  it('limits 64-bit values to safe JavaScript integers', () => {
    expect(parseGoUint(String(Number.MAX_SAFE_INTEGER), 64)).toBe(Number.MAX_SAFE_INTEGER);
    expect(() => parseGoUint('9007199254740992', 64)).toThrow('value out of range');
    expect(parseGoInt('-0x10')).toBe(-16);
    expect(() => parseGoInt('--1')).toThrow('invalid syntax');
  });
});

describe('CSV records (encoding/csv)', () => {
  it.each<[string, string[]]>([
    ['a,b', ['a', 'b']],
    [' a , b ', [' a ', ' b ']],
    ['"a,b",c', ['a,b', 'c']],
    ['"",x', ['', 'x']],
    ['a\nb', ['a']],
    ['a\r\nb', ['a']],
    ['\n\na', ['a']],
    ['"multi\nline"', ['multi\nline']],
  ])('%j', (input, fields) => {
    expect(parseCsvRecord(input)).toEqual(fields);
  });

  it('rejects a quoted field followed by text', () => {
    expect(() => parseCsvRecord('"a"b')).toThrow('extraneous or missing " in quoted-field');
  });
});
