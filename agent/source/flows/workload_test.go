package flows

import "testing"

func TestWorkloadFromPodName(t *testing.T) {
	for _, c := range []struct{ pod, want string }{
		{"shop/cart-7d9f8b6c5d-x2k4p", "shop/cart"},
		{"shop/cart-api-7d9f8b6c5d-x2k4p", "shop/cart-api"},
		{"kube-system/kube-proxy-x2k4p", "kube-system/kube-proxy"},
		{"shop/db-0", "shop/db"},
		{"shop/db-12", "shop/db"},
		{"shop/standalone", ""},
		{"shop/my-app", ""},    // "app" has a vowel: a word, not a suffix
		{"shop/cart-x2k4", ""}, // 4 characters: not a generated suffix
		{"noslash", ""},
		{"/cart-x2k4p", ""},
		{"shop/", ""},
	} {
		if got := Workload(c.pod); got != c.want {
			t.Errorf("Workload(%q) = %q, want %q", c.pod, got, c.want)
		}
	}
}
