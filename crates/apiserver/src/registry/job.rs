//! batch/v1 Jobs and CronJobs: what kube-apiserver's job strategy adds on create and what
//! its validation refuses.
//!
//! - **Selector generation** (create, unless `spec.manualSelector` is true): the pod
//!   template gets the labels `batch.kubernetes.io/controller-uid` (the Job's uid),
//!   `batch.kubernetes.io/job-name` and their legacy forms `controller-uid` and `job-name`
//!   (each only if absent), and the selector matches `batch.kubernetes.io/controller-uid`,
//!   so a Job never selects another Job's pods.
//! - **Validation** (422): the template's `restartPolicy` must be `OnFailure` or `Never`;
//!   a Job needs a selector (with `manualSelector: true`, one the user wrote) that matches
//!   its template's labels; a generated selector must name the Job's own uid; counts must
//!   not be negative; an Indexed Job needs `completions`. A CronJob needs a `schedule`,
//!   and its job template the same restart policy.

use api::labels::LabelSelector;
use api::object::Object;
use api::status::FieldError;
use api::Status;
use serde_json::{json, Map, Value};

/// The label (and selector key) naming a Job's uid.
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// The label naming the Job.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The legacy form of [`CONTROLLER_UID_LABEL`].
pub const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";
/// The legacy form of [`JOB_NAME_LABEL`].
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";

fn manual_selector(spec: &Map<String, Value>) -> bool {
    spec.get("manualSelector").and_then(Value::as_bool) == Some(true)
}

/// Adds the generated labels and selector to a new Job (`obj` has its name and uid).
pub fn generate_selector(obj: &mut Object) {
    let name = obj.name().to_string();
    let uid = obj.meta_str("uid").to_string();
    let Some(spec) = obj.0.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if manual_selector(spec) {
        return;
    }
    let Some(template) = spec.get_mut("template").and_then(Value::as_object_mut) else {
        return;
    };
    let meta = template.entry("metadata").or_insert_with(|| json!({}));
    if meta.is_null() {
        *meta = json!({});
    }
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if labels.is_null() {
        *labels = json!({});
    }
    let Some(labels) = labels.as_object_mut() else {
        return;
    };
    for (k, v) in [
        (LEGACY_JOB_NAME_LABEL, &name),
        (JOB_NAME_LABEL, &name),
        (LEGACY_CONTROLLER_UID_LABEL, &uid),
        (CONTROLLER_UID_LABEL, &uid),
    ] {
        labels.entry(k).or_insert_with(|| json!(v));
    }
    let selector = spec.entry("selector").or_insert_with(|| json!({}));
    if selector.is_null() {
        *selector = json!({});
    }
    let Some(selector) = selector.as_object_mut() else {
        return;
    };
    let match_labels = selector.entry("matchLabels").or_insert_with(|| json!({}));
    if match_labels.is_null() {
        *match_labels = json!({});
    }
    if let Some(m) = match_labels.as_object_mut() {
        m.entry(CONTROLLER_UID_LABEL).or_insert_with(|| json!(uid));
    }
}

fn restart_policy(template: Option<&Value>, path: &str, errs: &mut Vec<FieldError>) {
    let policy = template
        .and_then(|t| t.get("spec"))
        .and_then(|s| s.get("restartPolicy"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if policy != "OnFailure" && policy != "Never" {
        let field = format!("{path}.restartPolicy");
        if policy.is_empty() {
            errs.push(FieldError::required(field, ""));
        } else {
            errs.push(FieldError::not_supported(
                field,
                policy,
                &["OnFailure", "Never"],
            ));
        }
    }
}

fn non_negative(spec: &Map<String, Value>, field: &str, errs: &mut Vec<FieldError>) {
    if let Some(n) = spec.get(field).and_then(Value::as_i64) {
        if n < 0 {
            errs.push(FieldError::invalid(
                format!("spec.{field}"),
                &json!(n),
                "must be greater than or equal to 0",
            ));
        }
    }
}

/// The errors of a Job's spec, its fields under `path` (`spec`, or a CronJob's
/// `spec.jobTemplate.spec`); `uid` is the Job's own (empty for a CronJob's template).
fn job_spec_errors(spec: &Map<String, Value>, path: &str, uid: &str, errs: &mut Vec<FieldError>) {
    let template = spec.get("template");
    restart_policy(template, &format!("{path}.template.spec"), errs);
    for f in [
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
    ] {
        non_negative(spec, f, errs);
    }
    if let Some(n) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64) {
        if n == 0 {
            errs.push(FieldError::invalid(
                format!("{path}.activeDeadlineSeconds"),
                &json!(n),
                "must be greater than 0",
            ));
        }
    }
    if spec.get("completionMode").and_then(Value::as_str) == Some("Indexed")
        && spec.get("completions").is_none_or(Value::is_null)
    {
        errs.push(FieldError::required(
            format!("{path}.completions"),
            "when completion mode is Indexed",
        ));
    }
    if let Some(mode) = spec.get("completionMode").and_then(Value::as_str) {
        if mode != "Indexed" && mode != "NonIndexed" {
            errs.push(FieldError::not_supported(
                format!("{path}.completionMode"),
                mode,
                &["NonIndexed", "Indexed"],
            ));
        }
    }
    // A CronJob's template has no selector yet: each Job gets its own.
    if uid.is_empty() {
        return;
    }
    let selector = spec.get("selector").filter(|s| !s.is_null());
    let Some(selector) = selector else {
        errs.push(FieldError::required(format!("{path}.selector"), ""));
        return;
    };
    let parsed = match LabelSelector::from_object(selector) {
        Ok(Some(s)) => s,
        Ok(None) => LabelSelector::everything(),
        Err(e) => {
            errs.push(FieldError::invalid(
                format!("{path}.selector"),
                selector,
                &e.to_string(),
            ));
            return;
        }
    };
    if !manual_selector(spec) {
        let generated = selector
            .get("matchLabels")
            .and_then(|m| m.get(CONTROLLER_UID_LABEL))
            .and_then(Value::as_str);
        if generated != Some(uid) {
            errs.push(FieldError::invalid(
                format!("{path}.selector"),
                selector,
                "`selector` not auto-generated",
            ));
            return;
        }
    }
    let empty = Map::new();
    let labels = template
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    // An empty selector would take any pod: Kubernetes refuses it as not matching.
    if parsed.is_empty() || !parsed.matches(labels) {
        errs.push(FieldError::invalid(
            format!("{path}.template.metadata.labels"),
            &Value::Object(labels.clone()),
            "`selector` does not match template `labels`",
        ));
    }
}

/// Validates a Job or CronJob about to be stored.
///
/// # Errors
/// 422 Invalid naming every violated rule (see the module docs).
pub fn validate(kind: &str, obj: &Object) -> Result<(), Status> {
    let empty = Map::new();
    let spec = obj
        .0
        .get("spec")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut errs = Vec::new();
    match kind {
        "Job" => job_spec_errors(spec, "spec", obj.meta_str("uid"), &mut errs),
        "CronJob" => {
            if spec
                .get("schedule")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                errs.push(FieldError::required("spec.schedule", ""));
            }
            for f in [
                "startingDeadlineSeconds",
                "successfulJobsHistoryLimit",
                "failedJobsHistoryLimit",
            ] {
                non_negative(spec, f, &mut errs);
            }
            if let Some(policy) = spec.get("concurrencyPolicy").and_then(Value::as_str) {
                if !matches!(policy, "Allow" | "Forbid" | "Replace") {
                    errs.push(FieldError::not_supported(
                        "spec.concurrencyPolicy",
                        policy,
                        &["Allow", "Forbid", "Replace"],
                    ));
                }
            }
            let job_spec = spec
                .get("jobTemplate")
                .and_then(|t| t.get("spec"))
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            job_spec_errors(job_spec, "spec.jobTemplate.spec", "", &mut errs);
        }
        _ => {}
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(Status::invalid_fields(kind, "batch", obj.name(), &errs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(v: Value) -> Object {
        let Value::Object(m) = v else { unreachable!() };
        Object(m)
    }

    fn created(spec: Value) -> Object {
        let mut o = job(json!({"metadata": {"name": "pi", "uid": "u-1"}, "spec": spec}));
        generate_selector(&mut o);
        o
    }

    #[test]
    fn a_new_job_selects_its_own_uid() {
        let o = created(json!({"template": {"metadata": {"labels": {"app": "x"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}));
        let labels = &o.0["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["app"], "x");
        assert_eq!(labels[CONTROLLER_UID_LABEL], "u-1");
        assert_eq!(labels[LEGACY_CONTROLLER_UID_LABEL], "u-1");
        assert_eq!(labels[JOB_NAME_LABEL], "pi");
        assert_eq!(labels[LEGACY_JOB_NAME_LABEL], "pi");
        assert_eq!(
            o.0["spec"]["selector"],
            json!({"matchLabels": {CONTROLLER_UID_LABEL: "u-1"}})
        );
        assert!(validate("Job", &o).is_ok());
    }

    #[test]
    fn a_manual_selector_is_left_alone_and_must_match() {
        let o = created(
            json!({"manualSelector": true, "selector": {"matchLabels": {"app": "y"}},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"restartPolicy": "Never"}}}),
        );
        assert!(o.0["spec"]["template"]["metadata"]["labels"]
            .get(CONTROLLER_UID_LABEL)
            .is_none());
        let e = validate("Job", &o).unwrap_err();
        assert_eq!(e.code(), 422);
        assert!(
            e.message
                .contains("`selector` does not match template `labels`"),
            "{}",
            e.message
        );
        let o = created(json!({"manualSelector": true,
            "template": {"spec": {"restartPolicy": "Never"}}}));
        assert!(validate("Job", &o)
            .unwrap_err()
            .message
            .contains("spec.selector: Required value"));
    }

    #[test]
    fn restart_policy_always_and_foreign_uids_are_refused() {
        let o = created(json!({"template": {"spec": {"restartPolicy": "Always"}}}));
        let e = validate("Job", &o).unwrap_err();
        assert_eq!(
            e.message,
            "Job.batch \"pi\" is invalid: spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
        );
        let o = created(
            json!({"selector": {"matchLabels": {CONTROLLER_UID_LABEL: "other"}},
            "template": {"spec": {"restartPolicy": "Never"}}}),
        );
        assert!(validate("Job", &o)
            .unwrap_err()
            .message
            .contains("`selector` not auto-generated"));
        let o = created(json!({"completionMode": "Indexed", "parallelism": -1,
            "template": {"spec": {"restartPolicy": "OnFailure"}}}));
        let e = validate("Job", &o).unwrap_err();
        assert!(
            e.message.contains("spec.completions: Required value"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("spec.parallelism: Invalid value: -1"),
            "{}",
            e.message
        );
    }

    #[test]
    fn cron_jobs_need_a_schedule_and_a_valid_template() {
        let cj = job(
            json!({"metadata": {"name": "c"}, "spec": {"schedule": "*/1 * * * *",
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure"}}}}}}),
        );
        assert!(validate("CronJob", &cj).is_ok());
        let cj = job(
            json!({"metadata": {"name": "c"}, "spec": {"concurrencyPolicy": "Sometimes",
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Always"}}}}}}),
        );
        let e = validate("CronJob", &cj).unwrap_err();
        assert!(
            e.message.contains("spec.schedule: Required value"),
            "{}",
            e.message
        );
        assert!(
            e.message
                .contains("spec.concurrencyPolicy: Unsupported value"),
            "{}",
            e.message
        );
        assert!(
            e.message
                .contains("spec.jobTemplate.spec.template.spec.restartPolicy"),
            "{}",
            e.message
        );
    }
}
