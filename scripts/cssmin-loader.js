/**
 * A webpack loader for our own CSS (webpack.config.js): comments removed and whitespace collapsed before
 * css-loader, so that the commented, Prettier-formatted sources in style/ do not count twice against the
 * bundle budget (tests/test_packaging.py). Strings and url()s in style/ hold no comment markers or
 * significant runs of whitespace, and no `: ` in a selector; a space between selectors (the descendant
 * combinator) is kept.
 */
module.exports = function cssmin(source) {
  return source
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/\s+/g, ' ')
    .replace(/\s*([{};,])\s*/g, '$1')
    .replace(/:\s+/g, ':')
    .replace(/;}/g, '}')
    .trim();
};
