/**
 * @jest-environment node
 *
 * The browser's classifier against the shared corpus of real messages (tests/oom/corpus.json, the same file
 * tests/oom/test_oom_corpus.py reads): every out-of-memory message gets the family the kernel gives it, and
 * no other message is taken for one.
 */
import * as fs from 'fs';
import * as path from 'path';

import patterns from '../../../../gpumem_kernel/oom/patterns.json';
import { OOM_FAMILIES, isOomError, oomFamily } from '../detect';

interface ICorpusEntry {
  readonly file: string;
  readonly ename: string;
  readonly oom: boolean;
  readonly family: string | null;
}

const ROOT = path.resolve(__dirname, '../../../..');
const OOM_TESTS = path.join(ROOT, 'tests', 'oom');
const CORPUS: ICorpusEntry[] = JSON.parse(
  fs.readFileSync(path.join(OOM_TESTS, 'corpus.json'), 'utf-8')
).messages;

/** The message without its `# source:` line. */
function message(file: string): string {
  const lines = fs.readFileSync(path.join(OOM_TESTS, 'messages', file), 'utf-8').split('\n');
  return lines.slice(1).join('\n');
}

/** The IOPub `evalue` of the error: the message after the first `<ename>: `, else the whole message. */
function evalueOf(entry: ICorpusEntry, text: string): string {
  const marker = `${entry.ename}: `;
  const at = entry.ename ? text.indexOf(marker) : -1;
  return at >= 0 ? text.slice(at + marker.length) : text;
}

describe('the shared corpus', () => {
  it('lists every message file once, each with its source', () => {
    const files = fs.readdirSync(path.join(OOM_TESTS, 'messages')).filter(name => name.endsWith('.txt'));
    expect(CORPUS.map(entry => entry.file).sort()).toEqual(files.sort());
    for (const entry of CORPUS) {
      const first = fs.readFileSync(path.join(OOM_TESTS, 'messages', entry.file), 'utf-8').split('\n')[0];
      expect(first.startsWith('# source: ')).toBe(true);
      expect(entry.oom).toBe(entry.family !== null);
    }
  });

  it('has out-of-memory messages of every family and messages that are not one', () => {
    const families = new Set(CORPUS.map(entry => entry.family));
    for (const family of OOM_FAMILIES) {
      expect([family, families.has(family)]).toEqual([family, true]);
    }
    expect(CORPUS.filter(entry => entry.oom).length).toBeGreaterThanOrEqual(60);
    expect(CORPUS.filter(entry => !entry.oom).length).toBeGreaterThanOrEqual(15);
  });

  it('has no false positive: no message that is not an out-of-memory error is taken for one', () => {
    const taken = CORPUS.filter(entry => !entry.oom).filter(entry =>
      isOomError(entry.ename, evalueOf(entry, message(entry.file)))
    );
    expect(taken.map(entry => entry.file)).toEqual([]);
  });

  it.each(CORPUS.map(entry => [entry.file, entry] as const))('%s', (_, entry) => {
    const evalue = evalueOf(entry, message(entry.file));
    expect(oomFamily(entry.ename, evalue)).toBe(entry.family);
    expect(isOomError(entry.ename, evalue)).toBe(entry.oom);
  });
});

describe('patterns.json', () => {
  it('names exactly the families the browser knows', () => {
    const named = [...new Set(patterns.families.map(entry => entry.family))];
    expect(named).toEqual([...OOM_FAMILIES]);
    for (const entry of patterns.exception_names) {
      expect(OOM_FAMILIES).toContain(entry.family);
    }
  });

  it('has no pattern that no real message exercises', () => {
    const texts = CORPUS.filter(entry => entry.oom).map(entry => message(entry.file));
    for (const entry of patterns.families) {
      const flags = 'ignore_case' in entry && entry.ignore_case === true ? 'i' : '';
      for (const pattern of entry.patterns) {
        expect([pattern, texts.some(text => new RegExp(pattern, flags).test(text))]).toEqual([pattern, true]);
      }
    }
  });
});
