/**
 * ESLint for the TypeScript of the extension (src/), the UI tests (ui-tests/) and the JavaScript at the root
 * and in style/. Formatting is Prettier's (.prettierrc): eslint-config-prettier, last, turns off every rule
 * that would argue with it. `jlpm lint` fixes what can be fixed; `jlpm lint:check` only reports.
 *
 * Not type-aware: typescript-eslint's type-checked rules need a TypeScript program per run, which takes
 * several times longer on the two cores CI has; `tsc` already checks the types.
 */
const js = require('@eslint/js');
const jupyter = require('@jupyter/eslint-plugin');
const prettier = require('eslint-config-prettier');
const react = require('eslint-plugin-react');
const tseslint = require('typescript-eslint');

/** Globals of the CommonJS config files that Node runs (jest, Playwright, this file). */
const NODE_GLOBALS = {
  module: 'readonly',
  require: 'readonly',
  process: 'readonly',
  __dirname: 'readonly',
  console: 'readonly'
};

module.exports = tseslint.config(
  {
    ignores: [
      '**/node_modules/',
      'lib/',
      'coverage/',
      'gpumem_kernel/labextension/',
      'ui-tests/test-results/',
      'ui-tests/playwright-report/',
      // written by `jlpm gen:wire` from the JSON Schemas; checked by being regenerated, not by hand rules
      'src/wire/generated/',
      '.venv*/',
      '.yarn/'
    ]
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.{ts,tsx}'],
    ...react.configs.flat.recommended,
    settings: { react: { version: '18.2' } }
  },
  ...jupyter.configs.recommended,
  {
    plugins: { jupyter },
    rules: {
      // The project's names: interfaces I*, as JupyterLab's own.
      '@typescript-eslint/naming-convention': [
        'error',
        { selector: 'interface', format: ['PascalCase'], custom: { regex: '^I[A-Z]', match: true } }
      ],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      // Namespaces carry a class's options (`GpuMemModel.IOptions`), the JupyterLab way.
      '@typescript-eslint/no-namespace': 'off',
      eqeqeq: ['error', 'smart'],
      curly: ['error', 'all'],
      'prefer-const': 'error'
    }
  },
  {
    // The public interfaces sit at the bottom: types only, and only from the bottom modules (the wire format,
    // the settings, types.ts), so that no import circle passes through them and no layer above leaks in
    // (`jlpm lint:cycles` checks the whole graph).
    files: ['src/tokens.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['./*', '../*', '!./wire/*', '!./settings', '!./types'],
              message:
                'tokens.ts imports nothing of ours above the bottom layer: declare the type in types.ts (or wire/).'
            },
            {
              group: ['./wire/*', './settings', './types'],
              allowTypeImports: true,
              message: 'tokens.ts declares interfaces only: import types (`import type`) from our modules.'
            }
          ]
        }
      ]
    }
  },
  {
    // The plugin modules import what activate() builds at once (the model, the panel, the status item, the
    // actions and their host, the OOM outputs (oom/reveal), the output renderers and their plugin), and the
    // restart headline, which the panel loads at start anyway.
    files: ['src/index.ts', 'src/actions/plugin.ts', 'src/outputs/plugin.ts'],
    rules: {
      'jupyter/prefer-lazy-imports': [
        'warn',
        {
          ignoreImports: [
            './actions',
            './labhost',
            './restart/report',
            './oom/reveal',
            './mime',
            './outputs/plugin',
            './channel/model',
            './panel/panel',
            './panel/statusitem',
            './panel/statussummary',
            './settings'
          ]
        }
      ]
    }
  },
  {
    files: ['**/__tests__/**', 'ui-tests/**'],
    rules: {
      // Tests show what the user reads; they are no place for translations.
      'jupyter/no-untranslated-string': 'off'
    }
  },
  {
    files: ['**/*.js'],
    languageOptions: { sourceType: 'commonjs', globals: NODE_GLOBALS },
    rules: { '@typescript-eslint/no-require-imports': 'off' }
  },
  {
    files: ['style/*.js'],
    languageOptions: { sourceType: 'module' }
  },
  prettier
);
