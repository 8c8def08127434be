package model

import "fmt"

// MaxUIDLength bounds claim UIDs. Kubernetes UIDs are 36 characters.
const MaxUIDLength = 64

// ValidateUID checks that uid can safely be used as a file name: 1 to 64
// characters, each an ASCII letter, digit or '-'. Claim UIDs come from the
// API server and are treated as untrusted, so this keeps them from naming a
// path outside the checkpoint directory.
func ValidateUID(uid string) error {
	if uid == "" {
		return fmt.Errorf("invalid claim UID: it is empty; a claim UID must be 1-%d characters of ASCII letters, digits and '-'", MaxUIDLength)
	}
	if len(uid) > MaxUIDLength {
		return fmt.Errorf("invalid claim UID %q: it is %d bytes long; a claim UID must be 1-%d characters of ASCII letters, digits and '-'",
			Truncate(uid, 80), len(uid), MaxUIDLength)
	}
	for i := 0; i < len(uid); i++ {
		c := uid[i]
		if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' {
			continue
		}
		return fmt.Errorf("invalid claim UID %q: byte %d (%q) is not allowed; a claim UID must be 1-%d characters of ASCII letters, digits and '-'",
			uid, i, c, MaxUIDLength)
	}
	return nil
}

// Truncate shortens s to n bytes plus "..." for error messages.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
