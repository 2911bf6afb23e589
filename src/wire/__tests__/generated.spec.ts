/**
 * @jest-environment node
 *
 * src/wire/generated/ is what `jlpm gen:wire` makes of gpumem_kernel/wire/schemas/ today (the same check as
 * `node scripts/gen_wire.mjs --check` in scripts/test.sh), and nothing in src/ compiles a schema at run time.
 */
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';

const ROOT = path.join(__dirname, '..', '..', '..');

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap(entry => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      return entry.name === '__tests__' ? [] : sources(full);
    }
    return /\.tsx?$/.test(entry.name) ? [full] : [];
  });
}

describe('the generated wire code', () => {
  it('is up to date with the schemas', () => {
    const output = execFileSync(process.execPath, [path.join(ROOT, 'scripts', 'gen_wire.mjs'), '--check'], {
      cwd: ROOT,
      encoding: 'utf8'
    });
    expect(output).toContain('up to date');
  });

  it('is marked as generated', () => {
    for (const file of ['types.ts', 'validators.ts']) {
      const text = fs.readFileSync(path.join(ROOT, 'src', 'wire', 'generated', file), 'utf8');
      expect(text.startsWith('/*\n * GENERATED FILE: do not edit.')).toBe(true);
    }
  });

  it('needs no schema library in the browser: no ajv import, no Function constructor outside tests', () => {
    const offenders = sources(path.join(ROOT, 'src')).filter(file =>
      /from ['"]ajv|require\(['"]ajv|new Function\(|new Ajv/.test(fs.readFileSync(file, 'utf8'))
    );
    expect(offenders).toEqual([]);
  });
});
