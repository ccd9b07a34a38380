//go:build maintbroken

package maint

// brokenRelax: see brokenbuild.go. This build never relaxes a timeout.
const brokenRelax = true
