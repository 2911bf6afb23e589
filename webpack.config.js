/**
 * Additions to JupyterLab's extension build (package.json `jupyterlab.webpackConfig`, merged into the
 * builder's own configuration): our CSS goes through scripts/cssmin-loader.js first.
 */
const path = require('path');

module.exports = {
  module: {
    rules: [
      {
        test: /\.css$/,
        include: path.resolve(__dirname, 'style'),
        use: [path.resolve(__dirname, 'scripts', 'cssmin-loader.js')]
      }
    ]
  }
};
