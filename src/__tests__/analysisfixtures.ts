/**
 * Fixtures for the analysis / autobatch / benchmark renderers: real payloads from CPU runs of small torch
 * models (traced and simulated engines), made by scripts/make_renderer_fixtures.py, plus a renderer harness.
 */
import './domshim';

import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import * as fs from 'fs';
import * as path from 'path';
import { act } from 'react';

import {
  createGpumemRendererFactories,
  type GpumemAnalysisRenderer,
  type IGpumemRendererOptions
} from '../outputs/renderers';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

export const FIXTURE_DIR = path.join(__dirname, 'fixtures');

export type Json = Record<string, unknown>;

/** A fresh copy of a fixture (tests may mutate it). */
export function fixture(name: string): Json {
  return JSON.parse(fs.readFileSync(path.join(FIXTURE_DIR, `${name}.json`), 'utf8')) as Json;
}

export const ANALYSIS_FIXTURES = [
  'analysis_target',
  'analysis_accum',
  'analysis_nogpu',
  'analysis_hostile',
  'analysis_llm'
];
export const AUTOBATCH_FIXTURES = ['autobatch_simulated', 'autobatch_scan'];
export const BENCHMARK_FIXTURES = ['benchmark_simulated', 'benchmark_interrupted'];

export const HOSTILE = '<img src=x onerror=alert(1)>';

/** Set `value` at a dotted path ("recommendations.current.status", "rows.0.error"); undefined deletes. */
export function mutate(data: unknown, at: string, value: unknown): Json {
  const copy = JSON.parse(JSON.stringify(data)) as Json;
  const keys = at.split('.');
  let target = copy as Record<string, unknown>;
  for (const key of keys.slice(0, -1)) {
    target = target[key] as Record<string, unknown>;
  }
  const last = keys[keys.length - 1];
  if (value === undefined) {
    delete target[last];
  } else {
    target[last] = value;
  }
  return copy;
}

export function mimeModel(mimeType: string, data: unknown): IRenderMime.IMimeModel {
  return {
    trusted: true,
    data: { [mimeType]: data } as IRenderMime.IMimeModel['data'],
    metadata: {},
    setData: () => undefined
  };
}

export interface IHarness {
  readonly renderer: GpumemAnalysisRenderer;
  readonly node: HTMLElement;
  render(data: unknown): Promise<void>;
  dispose(): void;
}

/** A renderer for `mimeType`, attached to the document. */
export function harness(mimeType: string, options: IGpumemRendererOptions = {}): IHarness {
  const factory = createGpumemRendererFactories(options).find(f => f.mimeTypes.includes(mimeType));
  if (!factory) {
    throw new Error(`no factory for ${mimeType}`);
  }
  const renderer = factory.createRenderer({
    mimeType,
    sanitizer: { sanitize: (s: string) => s },
    resolver: null,
    linkHandler: null,
    latexTypesetter: null
  } as unknown as IRenderMime.IRendererOptions) as GpumemAnalysisRenderer;
  document.body.appendChild(renderer.node);
  return {
    renderer,
    node: renderer.node,
    async render(data: unknown): Promise<void> {
      await act(async () => {
        await renderer.renderModel(mimeModel(mimeType, data));
      });
    },
    dispose(): void {
      act(() => renderer.dispose());
      renderer.node.remove();
    }
  };
}

/** The texts of the elements matching `selector` under `node`. */
export function texts(node: ParentNode, selector: string): string[] {
  return [...node.querySelectorAll(selector)].map(e => e.textContent ?? '');
}

const GIB = 1024 ** 3;
const ADVISED = '%gpumem analyze Net --input x -b 32 --optimizer adamw --target "RTX 4080 Super"';

/** One row of the `advice` payload (what makes it fit): a lever that applies, with its own analysis. */
function adviceRow(
  key: string,
  lever: string,
  flags: string,
  cost: [string, string],
  peak: number,
  maximum: number,
  status: string,
  extra: Json = {}
): Json {
  return {
    key,
    lever,
    flags,
    command: `${ADVISED} ${flags}`,
    cost: cost[0],
    cost_kind: cost[1],
    peak_bytes: Math.round(peak * GIB),
    peak_allocated_bytes: Math.round(peak * GIB * 0.9),
    maximum,
    maximum_of: 'batch',
    status,
    fits: status === 'fits' || status === 'tight',
    per_rank: false,
    note: null,
    ...extra
  };
}

/**
 * The `advice` object of `%gpumem analyze … --advise` (gpumem_kernel/analysis/pipeline/advice.py), for the
 * analysis_target payload on a 16 GB card where the analysed step (22 GiB) will not fit: one lever alone does not
 * do it, AMP with checkpointing does (the recommended row), sharding over two GPUs does per GPU.
 */
export function adviceFixture(): Json {
  return {
    peak_bytes: 22 * GIB,
    status: 'will-not-fit',
    target: 'RTX 4080 Super',
    recommended: 2,
    reason: 'the cheapest row that fits: activations in bf16 and recomputed blocks, on this one GPU',
    rows: [
      adviceRow(
        'amp-bf16',
        'AMP bf16',
        '--amp bf16',
        ['activations in bf16', 'precision'],
        17.5,
        26,
        'will-not-fit'
      ),
      adviceRow(
        'checkpointing',
        'gradient checkpointing',
        '--checkpointing',
        ['about a third more compute', 'compute'],
        16.2,
        30,
        'will-not-fit'
      ),
      adviceRow(
        'amp-bf16+checkpointing',
        'AMP bf16 + gradient checkpointing',
        '--amp bf16 --checkpointing',
        ['activations in bf16; about a third more compute', 'precision'],
        11.8,
        52,
        'fits'
      ),
      adviceRow(
        'micro-batch',
        'smaller micro-batch',
        '-b 16 --accum 2',
        ['more, smaller steps per update', 'compute'],
        14.9,
        30,
        'tight'
      ),
      adviceRow(
        'fsdp-2',
        'FSDP over 2 GPUs',
        '--world-size 2 --strategy fsdp',
        ['a second GPU', 'gpus'],
        12.4,
        44,
        'fits',
        {
          per_rank: true,
          note: 'rank 0 traced under FSDP with a fake process group'
        }
      )
    ]
  };
}
