// deploycheck validates convdb's deployment files with the libraries the real tools use:
// compose-go (docker compose's loader and schema), kustomize's krusty (kubectl apply -k) with
// kubeconform's validator against the Kubernetes JSON schemas, and BuildKit's Dockerfile parser
// and linter (docker build --check). It exits 1 with the reasons when a file is invalid.
//
//	deploycheck compose [--env-file F] [--profile P]... [--print] compose.yaml
//	deploycheck k8s --schemas DIR [--kubernetes-version V] [--print] DIR_OR_FILE...
//	deploycheck dockerfile Dockerfile
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	digest "github.com/opencontainers/go-digest"
	"github.com/yannh/kubeconform/pkg/validator"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: deploycheck compose|k8s|dockerfile ..."))
	}
	var err error
	switch os.Args[1] {
	case "compose":
		err = checkCompose(os.Args[2:])
	case "k8s":
		err = checkK8s(os.Args[2:])
	case "dockerfile":
		err = checkDockerfile(os.Args[2:])
	default:
		err = fmt.Errorf("unknown check %q: expected compose, k8s or dockerfile", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "deploycheck: %v\n", err)
	os.Exit(1)
}

// checkCompose loads the file as `docker compose config` does: interpolation from the env file,
// the compose-spec schema, then the model's own consistency checks (depends_on targets, ...).
func checkCompose(args []string) error {
	fs := flag.NewFlagSet("compose", flag.ContinueOnError)
	var envFiles, profiles multi
	fs.Var(&envFiles, "env-file", "env file for interpolation (repeatable)")
	fs.Var(&profiles, "profile", "profile to enable (repeatable, '*' for all)")
	print := fs.Bool("print", false, "print the resolved project as JSON on stdout")
	if err := fs.Parse(args); err != nil || fs.NArg() < 1 {
		return errors.New("usage: deploycheck compose [--env-file F] [--profile P] [--print] FILE [OVERRIDE...]")
	}
	opts := []cli.ProjectOptionsFn{cli.WithName("convdb"), cli.WithProfiles(profiles), cli.WithDiscardEnvFile}
	if len(envFiles) > 0 {
		opts = append(opts, cli.WithEnvFiles(envFiles...), cli.WithDotEnv)
	}
	// Later files override earlier ones, as `docker compose -f base -f override` merges them.
	options, err := cli.NewProjectOptions(fs.Args(), opts...)
	if err != nil {
		return err
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(fs.Args(), " + "), err)
	}
	if *print {
		out, err := project.MarshalJSON()
		if err != nil {
			return err
		}
		os.Stdout.Write(append(out, '\n'))
	}
	fmt.Fprintf(os.Stderr, "compose %s: valid (%d services)\n", strings.Join(fs.Args(), " + "), len(project.Services))
	return nil
}

// checkK8s renders each kustomization (or reads plain manifests) and validates every resource
// strictly (unknown fields are errors) against local schemas; a kind without a schema is an error.
func checkK8s(args []string) error {
	fs := flag.NewFlagSet("k8s", flag.ContinueOnError)
	schemas := fs.String("schemas", "", "folder holding vX.Y.Z-local-strict/ schema folders")
	version := fs.String("kubernetes-version", "1.37.0", "Kubernetes version of the schemas")
	print := fs.Bool("print", false, "print the rendered resources as one JSON array on stdout")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 || *schemas == "" {
		return errors.New("usage: deploycheck k8s --schemas DIR [--kubernetes-version V] DIR_OR_FILE...")
	}
	location := filepath.Join(*schemas, "{{ .NormalizedKubernetesVersion }}-local{{ .StrictSuffix }}",
		"{{ .ResourceKind }}{{ .KindSuffix }}.json")
	v, err := validator.New([]string{location}, validator.Opts{Strict: true, KubernetesVersion: *version})
	if err != nil {
		return err
	}
	bad := 0
	var rendered []any
	for _, path := range fs.Args() {
		docs, err := render(path)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if *print {
			if rendered, err = appendJSON(rendered, docs); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
		count := 0
		for _, res := range v.Validate(path, io.NopCloser(bytes.NewReader(docs))) {
			sig, _ := res.Resource.Signature()
			name := path
			if sig != nil {
				name = fmt.Sprintf("%s %s/%s", path, sig.Kind, sig.Name)
			}
			switch res.Status {
			case validator.Valid:
				count++
			case validator.Empty:
			default:
				bad++
				fmt.Fprintf(os.Stderr, "%s: %s: %v\n", name, statusName(res.Status), res.Err)
			}
		}
		if count == 0 && bad == 0 {
			bad++
			fmt.Fprintf(os.Stderr, "%s: no Kubernetes resources\n", path)
		}
		fmt.Fprintf(os.Stderr, "k8s %s: %d valid resources (Kubernetes %s schemas)\n", path, count, *version)
	}
	if bad > 0 {
		return fmt.Errorf("%d invalid resource(s)", bad)
	}
	if *print {
		out, err := json.Marshal(rendered)
		if err != nil {
			return err
		}
		os.Stdout.Write(append(out, '\n'))
	}
	return nil
}

// appendJSON adds each document of a YAML stream, as plain JSON values, to out.
func appendJSON(out []any, docs []byte) ([]any, error) {
	for _, doc := range bytes.Split(docs, []byte("\n---\n")) {
		var value any
		if err := yaml.Unmarshal(doc, &value); err != nil {
			return nil, err
		}
		if value != nil {
			out = append(out, value)
		}
	}
	return out, nil
}

func statusName(s validator.Status) string {
	switch s {
	case validator.Invalid:
		return "invalid"
	case validator.Skipped:
		return "skipped (no schema)"
	default:
		return "error"
	}
}

// render returns the YAML stream of a kustomization folder (kubectl apply -k) or of a file.
func render(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return os.ReadFile(path)
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resources, err := k.Run(filesys.MakeFsOnDisk(), path)
	if err != nil {
		return nil, err
	}
	return resources.AsYaml()
}

// checkDockerfile parses the Dockerfile and runs BuildKit's build checks on every stage; any
// parse error or check warning fails (as `docker build --check` does with error=true).
func checkDockerfile(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: deploycheck dockerfile FILE")
	}
	dt, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	if _, err := parser.Parse(bytes.NewReader(dt)); err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	warnings := 0
	opt := dockerfile2llb.ConvertOpt{AllStages: true, MetaResolver: offlineImages{}}
	opt.Warn = func(rule, _, _, msg string, location []parser.Range) {
		line := 0
		if len(location) > 0 {
			line = location[0].Start.Line
		}
		warnings++
		fmt.Fprintf(os.Stderr, "%s:%d: %s: %s\n", args[0], line, rule, msg)
	}
	if _, err := dockerfile2llb.Dockerfile2Outline(context.Background(), dt, opt); err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	if warnings > 0 {
		return fmt.Errorf("%s: %d build check warning(s)", args[0], warnings)
	}
	fmt.Fprintf(os.Stderr, "dockerfile %s: valid, no build check warnings\n", args[0])
	return nil
}

// offlineImages answers every base image with an empty Linux config instead of asking a registry:
// the checks are about this Dockerfile, and this machine reaches no image registry.
type offlineImages struct{}

func (offlineImages) ResolveImageConfig(_ context.Context, ref string, _ sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	config := `{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/bin:/usr/bin:/bin"]}}`
	return ref, digest.FromString(config), []byte(config), nil
}
