//! Credentials in Nuvira's environment never reach a command from the repository: the local
//! sandbox drops the model keys, CI tokens and any `*_API_KEY`, `*_TOKEN`, `*_SECRET`,
//! `*_PASSWORD` variable, unless the step's own `env` passes it.

use super::support::nuvira;

const SECRETS: &[(&str, &str)] = &[
    ("NUVIRA_LLM_API_KEY", "sk-test-leak"),
    ("OPENAI_API_KEY", "sk-openai-leak"),
    ("ANTHROPIC_API_KEY", "sk-ant-leak"),
    ("GITHUB_TOKEN", "ghp_x"),
    ("GH_TOKEN", "gho_leak"),
    ("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "oidc-leak"),
    ("DEPLOY_SECRET", "deploy-leak"),
    ("DB_PASSWORD", "db-leak"),
];

fn assert_no_secret(env: &str) {
    for (name, value) in SECRETS {
        assert!(!env.contains(value), "{name} reached the command:\n{env}");
    }
}

#[test]
fn nuvira_test_in_the_local_sandbox_does_not_pass_credentials_on() {
    let repo = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let dump = out.path().join("env.txt");
    let mut cmd = nuvira();
    cmd.args(["test", "--sandbox", "local", "--repo"])
        .arg(repo.path())
        .arg("--command")
        .arg(format!("env > '{}'", dump.display()))
        .env("NUVIRA_KEEP_PATH_MARK", "still-here");
    for (name, value) in SECRETS {
        cmd.env(name, value);
    }
    let output = cmd.output().unwrap();
    let env = std::fs::read_to_string(&dump).unwrap_or_else(|e| {
        panic!(
            "the command did not run ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert_no_secret(&env);
    assert_no_secret(&String::from_utf8_lossy(&output.stdout));
    // Other variables are still inherited.
    assert!(env.contains("NUVIRA_KEEP_PATH_MARK=still-here"), "{env}");
}

#[test]
fn a_step_env_that_sets_a_token_explicitly_still_passes_it() {
    let repo = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let dump = out.path().join("env.txt");
    let plan = out.path().join("plan.yaml");
    std::fs::write(
        &plan,
        format!(
            r#"steps:
  - id: show
    module: execute
    config:
      command: "env > '{}'"
      sandbox: local
      env: {{ MY_TOKEN: "chosen-by-the-plan" }}
"#,
            dump.display()
        ),
    )
    .unwrap();
    let mut cmd = nuvira();
    cmd.arg("run").arg(&plan).arg("--repo").arg(repo.path());
    for (name, value) in SECRETS {
        cmd.env(name, value);
    }
    let output = cmd.output().unwrap();
    let env = std::fs::read_to_string(&dump).unwrap_or_else(|e| {
        panic!(
            "the step did not run ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(env.contains("MY_TOKEN=chosen-by-the-plan"), "{env}");
    assert_no_secret(&env);
}
