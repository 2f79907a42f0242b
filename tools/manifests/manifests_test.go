// Package manifests checks deploy/kubernetes as kubectl apply -k would see
// it: rendered by kustomize, every object decoded strictly against the
// Kubernetes API types, so a misspelt or misplaced field fails here rather
// than being dropped (or refused) by the API server.
//
// A module of its own: kustomize and k8s.io/api are large, and neither the
// project's binaries nor its other tools need them.
package manifests

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const (
	dir = "../../deploy/kubernetes"
	// image is what make image builds (tools/image) under the tag the
	// kustomization sets.
	image = "ghcr.io/nbs-project/nbs:VERSION"
)

// binaries are the commands the image holds (tools/image).
var binaries = []string{"nbs-agent", "nbs-collector"}

// strictDecoder decodes YAML into the registered API types and fails on
// unknown and duplicate fields and on kinds it does not know.
func strictDecoder(t *testing.T) runtime.Decoder {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{Yaml: true, Strict: true})
}

// render runs kustomize on dir and decodes every object it outputs.
func render(t *testing.T) []runtime.Object {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	dec := strictDecoder(t)
	var objs []runtime.Object
	for _, r := range res.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := dec.Decode(y, nil, nil)
		if err != nil {
			t.Errorf("%s %s: %v", r.GetKind(), r.GetName(), err)
			continue
		}
		objs = append(objs, obj)
	}
	return objs
}

func TestManifestsRenderAndDecodeStrictly(t *testing.T) {
	objs := render(t)
	var kinds []string
	var pods []corev1.PodTemplateSpec
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.Namespace:
			kinds = append(kinds, "Namespace")
		case *appsv1.Deployment:
			kinds = append(kinds, "Deployment/"+o.Name)
			checkWorkload(t, o.Name, o.Namespace, o.Spec.Selector.MatchLabels, o.Spec.Template)
			pods = append(pods, o.Spec.Template)
		case *appsv1.DaemonSet:
			kinds = append(kinds, "DaemonSet/"+o.Name)
			checkWorkload(t, o.Name, o.Namespace, o.Spec.Selector.MatchLabels, o.Spec.Template)
			pods = append(pods, o.Spec.Template)
		default:
			m, ok := obj.(interface{ GetNamespace() string })
			if ok && m.GetNamespace() != "nbs" {
				t.Errorf("%T in namespace %q, want nbs", obj, m.GetNamespace())
			}
		}
	}
	for _, want := range []string{"Namespace", "Deployment/nbs-collector", "DaemonSet/nbs-agent"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("rendered %v: no %s", kinds, want)
		}
	}
	// Services and disruption budgets must select some pod, or they
	// silently route to (or protect) nothing.
	for _, obj := range objs {
		var name string
		var sel labels.Selector
		switch o := obj.(type) {
		case *corev1.Service:
			name, sel = "Service/"+o.Name, labels.SelectorFromSet(o.Spec.Selector)
		case *policyv1.PodDisruptionBudget:
			s, err := metav1LabelSelector(o)
			if err != nil {
				t.Errorf("PodDisruptionBudget/%s: %v", o.Name, err)
				continue
			}
			name, sel = "PodDisruptionBudget/"+o.Name, s
		default:
			continue
		}
		if !slices.ContainsFunc(pods, func(p corev1.PodTemplateSpec) bool { return sel.Matches(labels.Set(p.Labels)) }) {
			t.Errorf("%s selects no pod (selector %s)", name, sel)
		}
	}
}

// checkWorkload: in the nbs namespace, selecting its own pods, and running
// only the image make image builds with a command that image holds.
func checkWorkload(t *testing.T, name, ns string, match map[string]string, tpl corev1.PodTemplateSpec) {
	t.Helper()
	if ns != "nbs" {
		t.Errorf("%s in namespace %q, want nbs", name, ns)
	}
	if !labels.SelectorFromSet(match).Matches(labels.Set(tpl.Labels)) {
		t.Errorf("%s: selector %v does not match its pods' labels %v", name, match, tpl.Labels)
	}
	for _, c := range append(slices.Clone(tpl.Spec.InitContainers), tpl.Spec.Containers...) {
		if c.Image != image {
			t.Errorf("%s container %s runs %q, want %q (make image)", name, c.Name, c.Image, image)
		}
		if len(c.Command) == 0 || !slices.Contains(binaries, c.Command[0]) {
			t.Errorf("%s container %s: command %q, want one of the image's %v", name, c.Name, c.Command, binaries)
		}
	}
}

func metav1LabelSelector(p *policyv1.PodDisruptionBudget) (labels.Selector, error) {
	if p.Spec.Selector == nil {
		return nil, fmt.Errorf("no selector")
	}
	set := labels.Set(p.Spec.Selector.MatchLabels)
	if len(p.Spec.Selector.MatchExpressions) > 0 {
		return nil, fmt.Errorf("matchExpressions: not checked here")
	}
	return labels.SelectorFromSet(set), nil
}

// The decoder above is what makes the test strict: it must refuse what
// the API server would drop or refuse.
func TestStrictDecoderRefuses(t *testing.T) {
	dec := strictDecoder(t)
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown field", `
apiVersion: v1
kind: ServiceAccount
metadata: {name: x}
automountServiceAccountTokn: false`, "unknown field"},
		{"field in the wrong place", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers: [{name: c, image: i, runAsUser: 0}]`, "unknown field"},
		{"duplicate field", `
apiVersion: v1
kind: Namespace
metadata: {name: p, name: q}`, "already set"},
		{"unknown kind", `
apiVersion: v1
kind: Pond
metadata: {name: x}`, "no kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := dec.Decode([]byte(tc.doc), nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decode: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
