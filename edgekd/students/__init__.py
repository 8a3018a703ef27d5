"""Students: small models trained to imitate a teacher. See `base.Student`."""

# The metadata file of a student folder, copied beside its ONNX exports too.
STUDENT_FILE = "student.json"
