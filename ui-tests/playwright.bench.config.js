/**
 * Frontend benchmarks (not tests: they assert nothing about time). Writes benchmarks/results/frontend.json.
 * Run: cd ui-tests && jlpm playwright test -c playwright.bench.config.js
 */
const base = require('./playwright.config');

module.exports = { ...base, testDir: './bench', retries: 0, timeout: 300000 };
