import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { relative } from 'node:path';
import { MEASURED_SECONDS } from './test-durations.js';

/**
 * Longest files first, so neither of the two workers is left alone with a long file at the end of the run.
 * Vitest's own order uses the durations it cached in an earlier run and falls back to file size, which puts
 * the long e2e files anywhere in a fresh clone (CI). Here a file weighs what the last run took when Vitest
 * has that cached, else its committed measurement (test-durations.ts), else nothing; equal weights keep
 * Vitest's order. The order changes no result, only how well the workers are packed.
 */
export default class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const base = await super.sort(files);
    const root = this.ctx.config.root;
    const weight = new Map(
      base.map((spec) => {
        const cached = this.ctx.cache.getTestSpecificationResult(spec)?.duration;
        const measured = MEASURED_SECONDS[relative(root, spec.moduleId)];
        return [spec, cached ?? (measured === undefined ? 0 : measured * 1000)] as const;
      }),
    );
    // Array.prototype.sort is stable: files of equal weight stay in Vitest's order.
    return [...base].sort((a, b) => (weight.get(b) ?? 0) - (weight.get(a) ?? 0));
  }
}
