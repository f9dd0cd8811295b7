from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = [("txqueue", "0001_initial")]
    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                (
                    "id",
                    models.AutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("total", models.IntegerField()),
                ("receipt_sent", models.BooleanField(default=False)),
            ],
        )
    ]
