/**
 * The memory timeline with the largest payload the schema allows (about 4000 bands, 4000 small points, 4000
 * reserved steps; src/outputs/timeline/__tests__/makepayload.ts `maximumPayload`), in Debian's Chromium:
 * - how long until it is drawn after the cell that displays it runs (kernel round trip included);
 * - frame times while the x axis is panned by dragging for about 2 s at 4× zoom, measured in the page with
 *   requestAnimationFrame (the interval between frames; 16.7 ms is every frame of a 60 Hz display).
 * Writes benchmarks/results/frontend_timeline.json. Asserts only that frames were measured, never a time.
 * Run: cd ui-tests && jlpm playwright test -c playwright.bench.config.js bench/timeline.spec.ts
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';
import { openNew } from '../tests/notebooks';
import { maximumPayload } from '../../src/outputs/timeline/__tests__/makepayload';

const ROOT = path.resolve(__dirname, '..', '..');
const MIME = 'application/vnd.gpumem.timeline.v1+json';
const DRAG_MS = 2000;

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
}

test('timeline: render and pan the maximum payload', async ({ page, tmpPath }) => {
  const payload = maximumPayload();
  const json = JSON.stringify(payload);
  await page.contents.uploadContent(json, 'text', `${tmpPath}/max.json`);
  await openNew(page, `${tmpPath}/max.ipynb`, [
    [
      'import json',
      'from IPython.display import display',
      `display({'${MIME}': json.load(open('max.json'))}, raw=True)`
    ].join('\n')
  ]);
  const t0 = Date.now();
  await page.notebook.runCell(0, true);
  const view = page.locator('.jp-GpuMem-timeline');
  await expect(view.locator('polygon.jp-GpuMem-tlBand')).toHaveCount(payload.bands.length, {
    timeout: 120000
  });
  const shownSeconds = (Date.now() - t0) / 1000;
  const svg = view.locator('svg.jp-GpuMem-tlSvg');
  await svg.scrollIntoViewIfNeeded();
  const vertices = await view.evaluate(
    v =>
      [...v.querySelectorAll('polygon, polyline')].reduce(
        (n, p) => n + (p.getAttribute('points') ?? '').split(' ').length,
        0
      ) as number
  );

  // Zoom in 4× around the middle, so that there is room to pan both ways.
  const box = (await svg.boundingBox())!;
  const [cx, cy] = [box.x + box.width / 2, box.y + box.height / 2];
  await page.mouse.move(cx, cy);
  for (let i = 0; i < 4; i++) {
    await page.mouse.wheel(0, -140);
    await page.waitForTimeout(100);
  }
  await expect(svg).not.toHaveAttribute('data-lo', '0.0');
  const span = await svg.evaluate(s => Number(s.getAttribute('data-hi')) - Number(s.getAttribute('data-lo')));

  // Frame times while dragging for DRAG_MS: the button is pressed for real, then the page moves the pointer
  // once per animation frame (Playwright's own moves take ~0.1 s each on a loaded machine, far slower than a
  // hand) and notes each frame's time and the x range it showed.
  await page.mouse.down();
  const { frames, los, moves } = await page.evaluate(
    ([x0, y0, width, ms]) =>
      new Promise<{ frames: number[]; los: string[]; moves: number }>(resolve => {
        const svgs = document.querySelectorAll('svg.jp-GpuMem-tlSvg');
        const axes = svgs[svgs.length - 1];
        const plot = axes.parentElement as HTMLElement;
        const frames: number[] = [];
        const los: string[] = [];
        let x = x0;
        let direction = 1;
        let moves = 0;
        const tick = (t: number): void => {
          frames.push(t);
          los.push(axes.getAttribute('data-lo') ?? '');
          if (t - frames[0] > ms) {
            resolve({ frames, los, moves });
            return;
          }
          x += direction * 6;
          if (Math.abs(x - x0) > width / 3) {
            direction = -direction;
          }
          plot.dispatchEvent(
            new PointerEvent('pointermove', {
              bubbles: true,
              clientX: x,
              clientY: y0,
              pointerId: 1,
              buttons: 1
            })
          );
          moves++;
          requestAnimationFrame(tick);
        };
        requestAnimationFrame(tick);
      }),
    [cx, cy, box.width, DRAG_MS] as [number, number, number, number]
  );
  await page.mouse.up();
  const intervals = frames.slice(1).map((t, i) => t - frames[i]);
  expect(intervals.length).toBeGreaterThan(10);
  const views = los.filter((lo, i) => i > 0 && lo !== los[i - 1]).length;

  const result = {
    name: 'frontend_timeline',
    date: new Date().toISOString(),
    command: 'cd ui-tests && jlpm playwright test -c playwright.bench.config.js bench/timeline.spec.ts',
    machine: {
      platform: `${os.platform()} ${os.release()}`,
      cpu_count: os.cpus().length,
      browser: 'Debian chromium (headless)'
    },
    payload: {
      bands: payload.bands.length,
      small_points: payload.small.length,
      reserved_points: payload.reserved?.length ?? 0,
      stacks: payload.stacks.length,
      json_bytes: json.length,
      svg_vertices_drawn: vertices
    },
    shown_after_run_seconds: shownSeconds,
    pan: {
      drag_ms: DRAG_MS,
      zoomed_span_events: span,
      timeline_end_events: payload.end,
      frames: intervals.length,
      pointer_moves: moves,
      frames_with_a_new_view: views,
      frame_ms_median: quantile(intervals, 0.5),
      frame_ms_p95: quantile(intervals, 0.95),
      frame_ms_max: Math.max(...intervals)
    }
  };
  fs.writeFileSync(
    path.join(ROOT, 'benchmarks', 'results', 'frontend_timeline.json'),
    JSON.stringify(result, null, 2) + '\n'
  );
  console.log(JSON.stringify(result, null, 2));
});
