// Package doclinks checks the relative links of the repository's Markdown files.
package doclinks
