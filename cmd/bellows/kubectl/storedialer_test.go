package kubectl

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The addresses stores give each other, and so the client, name a pod by
// its DNS name under the headless Service or by its IP; anything else is
// no pod of the cluster (never the first pod by default).
func TestPodOfHostNamesThePodByDNSNameOrIP(t *testing.T) {
	pods := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "kv-0"}, Status: corev1.PodStatus{PodIP: "10.1.0.7", PodIPs: []corev1.PodIP{{IP: "10.1.0.7"}, {IP: "fd00::7"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "kv-1"}, Status: corev1.PodStatus{PodIP: "10.1.0.8"}},
	}
	for host, want := range map[string]string{
		"kv-1": "kv-1", "kv-0.kv-headless.db.svc.cluster.local": "kv-0", "kv-1.kv-headless": "kv-1",
		"10.1.0.8": "kv-1", "fd00::7": "kv-0",
		"kv-2.kv-headless": "", "10.1.0.9": "", "kv": "", "": "",
	} {
		got, ok := PodOfHost(host, pods)
		if got != want || ok != (want != "") {
			t.Errorf("PodOfHost(%q) = %q, %v; want %q", host, got, ok, want)
		}
	}
}
