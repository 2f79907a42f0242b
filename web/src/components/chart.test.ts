import { describe, expect, it, vi } from 'vitest';

vi.mock('uplot', () => ({ default: class {} }));
import { placeLabels } from './Chart';

describe('threshold labels', () => {
  it.each([
    // [wanted ys, placed ys]: gap 13, plot from 0 to 200
    ['far apart: where they want to be', [150, 60], [150, 60]],
    ['warn 3 and crit 10 two pixels apart ("wcrit10"): the lower moves down', [101, 99], [112, 99]],
    ['the same y: stacked', [80, 80], [80, 93]],
    ['both off the scale, at the top edge: stacked below it', [0, 0], [13, 26]],
    ['crowded at the bottom: the stack moves up', [199, 198], [200, 187]],
    ['one label', [40], [40]],
  ])('%s', (_name, wanted, placed) => {
    const got = placeLabels(wanted as number[], 13, 0, 200);
    expect(got).toEqual(placed);
    const sorted = [...got].sort((a, b) => a - b);
    for (let i = 1; i < sorted.length; i++) expect(sorted[i] - sorted[i - 1]).toBeGreaterThanOrEqual(13);
  });
});
