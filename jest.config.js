/**
 * Unit tests: ts-jest in jsdom, transpiling only (the types are checked by `jlpm lint:types`). The tested modules
 * import @jupyterlab/* packages for types only (erased at compile time), so no ESM transform of node_modules is
 * needed; runtime imports are @lumino packages (CommonJS) and React.
 */
module.exports = {
  testEnvironment: 'jsdom',
  roots: ['<rootDir>/src'],
  testMatch: ['**/__tests__/**/*.spec.ts?(x)'],
  transform: {
    '^.+\\.tsx?$': [
      'ts-jest',
      {
        tsconfig: {
          jsx: 'react',
          module: 'commonjs',
          target: 'ES2019',
          esModuleInterop: true,
          strict: true,
          noImplicitAny: true,
          skipLibCheck: true,
          resolveJsonModule: true,
          types: ['jest', 'node'],
          // Transpile only, each file alone: a type-checking ts-jest builds a program per worker and checks every
          // spec with its imports (twice the CPU of the whole run). The types of src/ and of the specs are checked
          // once, by `jlpm lint:types` (tsconfig.test.json).
          isolatedModules: true
        }
      }
    ],
    '^.+/@jupyterlab/translation/lib/.+\\.js$': [
      'ts-jest',
      {
        tsconfig: {
          allowJs: true,
          module: 'commonjs',
          target: 'ES2019',
          esModuleInterop: true,
          skipLibCheck: true
        }
      }
    ]
  },
  // One ESM module of JupyterLab is compiled for the tests: its gettext, the reference for ui/i18n's placeholders.
  transformIgnorePatterns: ['/node_modules/(?!@jupyterlab/translation/lib/)'],
  moduleFileExtensions: ['ts', 'tsx', 'js', 'json'],
  collectCoverageFrom: ['src/**/*.{ts,tsx}', '!src/**/__tests__/**', '!src/**/*.d.ts'],
  coverageReporters: ['text-summary', 'lcov']
};
