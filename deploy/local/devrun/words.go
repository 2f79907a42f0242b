package main

import (
	"errors"
	"strings"
)

// splitWords splits s into arguments like a POSIX shell would, minus
// expansion: whitespace separates, single quotes are literal, double
// quotes allow \" and \\, and a backslash outside quotes escapes the next
// character. It lets --agent.args carry values with spaces.
func splitWords(s string) ([]string, error) {
	var (
		words   []string
		cur     strings.Builder
		inWord  bool
		quote   rune // 0, '\'' or '"'
		escaped bool
	)
	for _, r := range s {
		switch {
		case escaped:
			if quote == '"' && r != '"' && r != '\\' {
				cur.WriteRune('\\') // inside "", only \" and \\ are escapes
			}
			cur.WriteRune(r)
			escaped = false
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\\' && quote != '\'':
			escaped, inWord = true, true
		case quote == '"':
			if r == '"' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	switch {
	case escaped:
		return nil, errors.New("trailing backslash")
	case quote != 0:
		return nil, errors.New("unterminated " + string(quote) + " quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
